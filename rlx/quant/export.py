"""Write / read NVFP4 checkpoints in compressed-tensors' format (what llm-compressor writes, vLLM loads); the layout
(config.json's `quantization_config`, `weight_packed` / `weight_scale` / `weight_global_scale`): docs/quant.md."""

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from rlx.quant.linear import QuantLinear
from rlx.quant.tensor import QuantizedTensor

CT_FORMAT = "nvfp4-pack-quantized"
NVFP4_WEIGHT_ARGS = {"num_bits": 4, "type": "float", "symmetric": True, "group_size": 16, "strategy": "tensor_group",
                     "dynamic": False, "scale_dtype": "torch.float8_e4m3fn"}
WEIGHTS_NAME = "model.safetensors"


def _base_model(model: nn.Module) -> nn.Module:
    """Unwrap a PeftModel to the transformers model (LoRA wrappers stay; their base layers are exported)."""
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


def _clean(name: str) -> str:
    return name.replace(".base_layer", "")


def quantization_config(ignore: list[str]) -> dict:
    """The compressed-tensors quantization_config for an NVFP4 (weight-only) checkpoint."""
    group = {"targets": ["Linear"], "weights": dict(NVFP4_WEIGHT_ARGS), "input_activations": None,
             "output_activations": None, "format": CT_FORMAT}
    return {"config_groups": {"group_0": group}, "quant_method": "compressed-tensors", "format": CT_FORMAT,
            "quantization_status": "compressed", "kv_cache_scheme": None, "global_compression_ratio": None,
            "ignore": ignore, "sparsity_config": {}, "transform_config": {}}


def _checkpoint_tensors(model: nn.Module) -> tuple[dict[str, Tensor], list[str]]:
    """(tensors to save, names of Linear layers left in high precision)."""
    quantized = {_clean(n): m for n, m in model.named_modules() if isinstance(m, QuantLinear)}
    formats = {m.fmt for m in quantized.values()}
    if not quantized:
        raise ValueError("export_compressed_tensors: the model has no QuantLinear (quantize with quant.format=nvfp4)")
    if formats != {"nvfp4"}:
        raise ValueError(f"export_compressed_tensors writes nvfp4 only; the model holds {sorted(formats)}")

    tensors: dict[str, Tensor] = {}
    for key, value in model.state_dict().items():
        name = _clean(key)
        owner = name.rsplit(".", 1)[0]
        if "lora_" in key or owner in quantized:
            continue  # adapters are saved by PEFT; quantized layers are written below
        tensors[name] = value
    for name, module in quantized.items():
        qt = module.quantized_weight
        tensors[f"{name}.weight_packed"] = qt.packed
        tensors[f"{name}.weight_scale"] = qt.scale
        tensors[f"{name}.weight_global_scale"] = qt.global_scale
        if module.bias is not None:
            tensors[f"{name}.bias"] = module.bias.detach()

    if getattr(getattr(model, "config", None), "tie_word_embeddings", False):
        tensors.pop("lm_head.weight", None)  # tied to the input embedding, as HF saves it
    seen: set[int] = set()
    for name in list(tensors):
        t = tensors[name].detach().contiguous()
        if t.data_ptr() in seen and t.numel() > 0:
            t = t.clone()  # safetensors refuses shared storage
        seen.add(t.data_ptr())
        tensors[name] = t.cpu()

    ignore = sorted(_clean(n) for n, m in model.named_modules()
                    if isinstance(m, nn.Linear) and "lora_" not in n and _clean(n) not in quantized)
    return tensors, ignore


def export_compressed_tensors(model: nn.Module, tokenizer, out_dir: str | Path) -> Path:
    """Write the NVFP4 model as a compressed-tensors checkpoint (a PeftModel's base, not adapters); returns out_dir."""
    model = _base_model(model)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tensors, ignore = _checkpoint_tensors(model)
    save_file(tensors, str(out / WEIGHTS_NAME), metadata={"format": "pt"})
    model.config.save_pretrained(out)
    config_path = out / "config.json"
    config = json.loads(config_path.read_text())
    config["quantization_config"] = quantization_config(ignore)
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True))
    if tokenizer is not None:
        tokenizer.save_pretrained(out)
    return out


def _check_quantization_config(qcfg: dict | None) -> None:
    if not qcfg or qcfg.get("quant_method") != "compressed-tensors":
        raise ValueError("config.json has no compressed-tensors quantization_config")
    for group_name, group in qcfg.get("config_groups", {}).items():
        weights = group.get("weights") or {}
        wanted = {k: NVFP4_WEIGHT_ARGS[k] for k in ("num_bits", "type", "group_size", "strategy")}
        got = {k: weights.get(k) for k in wanted}
        if got != wanted or group.get("input_activations") is not None:
            raise ValueError(f"{group_name}: only NVFP4 weight-only (NVFP4A16) checkpoints load here, got {got}")


def _read_tensors(path: Path) -> dict[str, Tensor]:
    index = path / f"{WEIGHTS_NAME}.index.json"
    files = sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.exists() else [WEIGHTS_NAME]
    tensors: dict[str, Tensor] = {}
    for file in files:
        tensors.update(load_file(str(path / file)))
    return tensors


def _materialize_meta_buffers(model: nn.Module) -> None:
    """Non-persistent buffers (e.g. rotary inv_freq) are not in the checkpoint: re-create them on CPU."""
    for module in model.modules():
        metas = [name for name, buf in module.named_buffers(recurse=False) if buf.is_meta]
        if not metas:
            continue
        for name in metas:
            module._buffers[name] = torch.empty_like(module._buffers[name], device="cpu")
        model._init_weights(module)


@torch.no_grad()
def load_compressed_tensors(path: str | Path, dtype: torch.dtype = torch.bfloat16, kernel: str = "auto") -> nn.Module:
    """Load an NVFP4 compressed-tensors checkpoint as a transformers model whose quantized layers are
    QuantLinear (packed; nothing is decompressed). Other tensors are cast to `dtype`."""
    from transformers import AutoConfig, AutoModelForCausalLM

    path = Path(path)
    config = AutoConfig.from_pretrained(path)
    qcfg = getattr(config, "quantization_config", None)
    qcfg = qcfg if isinstance(qcfg, dict) else getattr(qcfg, "to_dict", lambda: None)()
    _check_quantization_config(qcfg)
    del config.quantization_config
    tensors = _read_tensors(path)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)

    for name in [k[: -len(".weight_packed")] for k in tensors if k.endswith(".weight_packed")]:
        packed = tensors.pop(f"{name}.weight_packed")
        qt = QuantizedTensor(fmt="nvfp4", packed=packed,
                             scale=tensors.pop(f"{name}.weight_scale").to(torch.float8_e4m3fn),
                             global_scale=tensors.pop(f"{name}.weight_global_scale").to(torch.float32).reshape(1),
                             shape=torch.Size((packed.shape[0], packed.shape[1] * 2)), dtype=dtype)
        bias = tensors.pop(f"{name}.bias", None)
        owner, _, attr = name.rpartition(".")
        setattr(model.get_submodule(owner), attr, QuantLinear(qt, None if bias is None else bias.to(dtype), kernel))

    tensors = {k: (v.to(dtype) if v.is_floating_point() else v) for k, v in tensors.items()}
    result = model.load_state_dict(tensors, strict=False, assign=True)
    if config.tie_word_embeddings:
        model.tie_weights()
    quantized = {n for n, m in model.named_modules() if isinstance(m, QuantLinear)}
    missing = [k for k in result.missing_keys
               if k.rsplit(".", 1)[0] not in quantized and not (config.tie_word_embeddings and k == "lm_head.weight")]
    if missing or result.unexpected_keys:
        raise ValueError(f"checkpoint does not match the model: missing {missing}, unexpected {result.unexpected_keys}")
    _materialize_meta_buffers(model)
    leftover = [n for n, t in list(model.named_parameters()) + list(model.named_buffers()) if t.is_meta]
    if leftover:
        raise ValueError(f"tensors left uninitialized after loading: {leftover}")
    return model.eval()
