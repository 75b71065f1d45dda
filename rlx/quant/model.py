"""Quantize the decoder blocks of a HF causal LM in place (QeRL's frozen 4-bit base)."""

import torch
from torch import nn

from rlx.quant.config import QuantConfig
from rlx.quant.formats import get_format, quantize
from rlx.quant.linear import KERNELS, QuantLinear
from rlx.quant.nvfp4 import shared_global_scale

# Layers vLLM fuses into one GEMM; under nvfp4 each group shares one global scale.
FUSED_GROUPS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The decoder blocks: `model.model.layers` for Qwen2/Llama-style ForCausalLM models."""
    for path in ("model.layers", "layers"):
        module = model
        for part in path.split("."):
            module = getattr(module, part, None)
        if isinstance(module, nn.ModuleList):
            return module
    raise ValueError(f"cannot find the decoder blocks of {type(model).__name__} (expected model.model.layers)")


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _replace(parent: nn.Module, name: str, new: nn.Module) -> None:
    owner_path, _, attr = name.rpartition(".")
    owner = parent.get_submodule(owner_path) if owner_path else parent
    setattr(owner, attr, new)


def _shared_global_scales(targets: dict[str, nn.Linear]) -> dict[str, torch.Tensor]:
    """Module name -> the global scale it shares with the rest of its fused group."""
    shared = {}
    for group in FUSED_GROUPS:
        members = [name for name in targets if _short(name) in group]
        if len(members) > 1:
            scale = shared_global_scale([targets[name].weight.detach() for name in members])
            shared.update({name: scale for name in members})
    return shared


def target_linears(layer: nn.Module, targets) -> dict[str, nn.Linear]:
    """The nn.Linear modules of one decoder block that quant.targets names (by module-name suffix)."""
    return {name: module for name, module in layer.named_modules()
            if isinstance(module, nn.Linear) and _short(name) in targets}


@torch.no_grad()
def quantized_weights(model: nn.Module, cfg: QuantConfig):
    """Yield (block index, name in the block, nn.Linear, QuantizedTensor) for every layer quantize_model replaces,
    quantized as it does; the model is left as is. Refuses an unknown format or kernel, and targets matching nothing."""
    get_format(cfg.format)  # unknown names fail here
    if cfg.kernel not in KERNELS:
        raise ValueError(f"quant.kernel must be one of {KERNELS}, got {cfg.kernel!r}")
    found = 0
    for index, layer in enumerate(decoder_layers(model)):
        targets = target_linears(layer, cfg.targets)
        shared = _shared_global_scales(targets) if cfg.format == "nvfp4" and cfg.fuse_global_scales else {}
        for name, linear in targets.items():
            kwargs = {"global_scale": shared[name]} if name in shared else {}
            if cfg.format == "nf4":
                kwargs["double_quant"] = cfg.double_quant
            found += 1
            yield index, name, linear, quantize(linear.weight, cfg.format, **kwargs)
        del targets
    if found == 0:
        raise ValueError(f"quant.targets {list(cfg.targets)} matched no nn.Linear inside the decoder blocks")


@torch.no_grad()
def quantize_model(model: nn.Module, cfg: QuantConfig) -> nn.Module:
    """Replace the targeted nn.Linear of every decoder block by a frozen packed QuantLinear (format "none": as is)."""
    if cfg.format == "none":
        return model
    layers = decoder_layers(model)
    for index, name, linear, qweight in quantized_weights(model, cfg):
        _replace(layers[index], name, QuantLinear(qweight, linear.bias, kernel=cfg.kernel))
    return model


def quant_linears(model: nn.Module) -> dict[str, QuantLinear]:
    return {name: m for name, m in model.named_modules() if isinstance(m, QuantLinear)}


def quantized_bytes(model: nn.Module) -> tuple[int, int]:
    """(bytes of packed codes + scales, bytes the same weights take in 16 bits), over all QuantLinear."""
    packed = sixteen_bit = 0
    for module in quant_linears(model).values():
        packed += module.quant_nbytes()
        sixteen_bit += 2 * module.in_features * module.out_features
    return packed, sixteen_bit


def packed_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """Copies of every QuantLinear buffer (codes, scales) by qualified name, for 'base unchanged' checks."""
    return {f"{name}.{buffer_name}": buffer.detach().clone() for name, module in quant_linears(model).items()
            for buffer_name, buffer in module.named_buffers(recurse=False)}
