"""Frozen 4-bit bases for LoRA RL (QeRL): NVFP4, NF4, MXFP4; see docs/quant.md."""

from rlx.quant.config import QuantConfig
from rlx.quant.export import export_compressed_tensors, load_compressed_tensors
from rlx.quant.formats import FORMATS, dequantize, get_format, quantize
from rlx.quant.linear import QuantLinear
from rlx.quant.model import decoder_layers, packed_state, quant_linears, quantize_model, quantized_bytes
from rlx.quant.tensor import QuantizedTensor

_PEFT_NAMES = ("LoraQuantLinear", "load_lora_adapter", "prepare_lora_config")


def __getattr__(name: str):
    """The PEFT-facing names import peft (slow) only when first used."""
    if name in _PEFT_NAMES:
        from rlx.quant import lora

        return getattr(lora, name)
    raise AttributeError(f"module 'rlx.quant' has no attribute {name!r}")


__all__ = ["FORMATS", "LoraQuantLinear", "QuantConfig", "QuantLinear", "QuantizedTensor", "decoder_layers",
           "dequantize", "export_compressed_tensors", "get_format", "load_compressed_tensors", "load_lora_adapter",
           "packed_state", "prepare_lora_config", "quant_linears", "quantize", "quantize_model", "quantized_bytes"]
