"""The policy's weights as vLLM loads them (HF names, the engine dtype), exported on the trainer side at each
sync: merged (LoRA folded in) or full; and the tied head an in-place reload misses on vLLM's CPU backend."""

from __future__ import annotations

import torch

from rlx.models.forward import causal_lm


def adapter_rank(policy) -> int:
    """The largest LoRA rank among the policy's adapted layers: the slot vLLM must hold."""
    from peft.tuners.lora import LoraLayer

    return max(int(m.r[k]) for m in causal_lm(policy).modules() if isinstance(m, LoraLayer) for k in m.r)


def merged_state_dict(policy, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """HF-named weights, LoRA merged in (W + s B A; a packed W dequantized).  # name -> tensor"""
    from peft.tuners.lora import Linear as LoraLinear

    from rlx.quant.linear import QuantLinear
    from rlx.quant.lora import LoraQuantLinear

    lm = causal_lm(policy)
    out: dict[str, torch.Tensor] = {}
    lora, packed = {}, {}
    for name, mod in lm.named_modules():
        if isinstance(mod, (LoraLinear, LoraQuantLinear)):
            lora[name] = mod
        elif isinstance(mod, QuantLinear):  # a packed base layer: vLLM gets its dequantized values
            packed[name.replace(".base_layer", "")] = mod
    for key, value in lm.state_dict().items():
        if "lora_" in key or ".original_module." in key:
            continue
        key = key.replace(".base_layer.", ".").replace(".modules_to_save.default.", ".")
        if key.rpartition(".")[0] in packed and key.rpartition(".")[2] != "bias":
            continue  # the codes and scales; the layer's `weight` is added below
        out[key] = value
    with torch.no_grad():
        for name, mod in packed.items():
            out[f"{name}.weight"] = mod.dequantize(torch.float32)
        for name, mod in lora.items():
            # a packed base layer was dequantized just above: reuse it rather than dequantize again
            w = out[f"{name}.weight"] if isinstance(mod.base_layer, QuantLinear) else mod.base_layer.weight.float()
            if not mod.merged and not mod.disable_adapters:
                for adapter in mod.active_adapters:
                    if adapter in mod.lora_A:
                        w = w + mod.get_delta_weight(adapter).float()
            out[f"{name}.weight"] = w
    return {k: v.detach().to(dtype) for k, v in out.items()}  # stays on the trainer device


def full_state_dict(policy, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """HF-named weights of a fully fine-tuned policy, a tied head once (vLLM ties it).  # name -> tensor"""
    return {n: q.detach().to(dtype) for n, q in causal_lm(policy).named_parameters()}


def repack_tied_head(model) -> None:
    """Repack a tied head from the new embedding: vLLM's CPU backend packs it at load, and a reload skips it."""
    head = getattr(model, "lm_head", None)
    if head is not None and getattr(getattr(model, "config", None), "tie_word_embeddings", False):
        head.quant_method.process_weights_after_loading(head)
