"""Registry of quantization formats, chosen by short name (quant.format)."""

from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor

from rlx.quant.mxfp4 import BLOCK as MXFP4_BLOCK
from rlx.quant.mxfp4 import dequantize_mxfp4, quantize_mxfp4
from rlx.quant.nf4 import BLOCK as NF4_BLOCK
from rlx.quant.nf4 import dequantize_nf4, quantize_nf4
from rlx.quant.nvfp4 import BLOCK as NVFP4_BLOCK
from rlx.quant.nvfp4 import dequantize_nvfp4, quantize_nvfp4
from rlx.quant.tensor import QuantizedTensor


@dataclass(frozen=True)
class QuantFormat:
    name: str
    block: int  # elements along in_features that share one scale
    quantize: Callable[..., QuantizedTensor]
    dequantize: Callable[[QuantizedTensor, torch.dtype], Tensor]


FORMATS: dict[str, QuantFormat] = {
    "nvfp4": QuantFormat("nvfp4", NVFP4_BLOCK, quantize_nvfp4, dequantize_nvfp4),
    "nf4": QuantFormat("nf4", NF4_BLOCK, quantize_nf4, dequantize_nf4),
    "mxfp4": QuantFormat("mxfp4", MXFP4_BLOCK, quantize_mxfp4, dequantize_mxfp4),
}


def get_format(name: str) -> QuantFormat:
    if name not in FORMATS:
        raise ValueError(f"unknown quant format {name!r}; choose one of {sorted(FORMATS)} (or 'none')")
    return FORMATS[name]


def quantize(weight: Tensor, fmt: str, **kw) -> QuantizedTensor:
    """Quantize a 2-D weight [out, in]; kw: nvfp4 `global_scale` (fp32 [1]), nf4 `double_quant` (bool)."""
    if not isinstance(weight, Tensor):
        raise ValueError(f"{fmt}: expected a torch.Tensor, got {type(weight).__name__}")
    return get_format(fmt).quantize(weight.detach(), **kw)


def dequantize(qt: QuantizedTensor, dtype: torch.dtype | None = None) -> Tensor:
    """Full-precision weight [N, K] of `qt` in `dtype` (default: the dtype it was quantized from)."""
    return get_format(qt.fmt).dequantize(qt, dtype or qt.dtype)
