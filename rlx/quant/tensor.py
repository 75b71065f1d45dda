"""QuantizedTensor: packed 4-bit codes plus the scales needed to dequantize them (rlx.quant.formats.dequantize)."""

from dataclasses import dataclass, fields

import torch
from torch import Tensor

SUPPORTED_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


@dataclass
class QuantizedTensor:
    """A quantized 2-D weight [N, K] (out_features, in_features)."""

    fmt: str
    packed: Tensor  # uint8 [N, K/2], two 4-bit codes per byte (nibble order depends on the format)
    # per-block scales: nvfp4 fp8 e4m3 [N, K/16], mxfp4 uint8 e8m0 exponents [N, K/32], nf4 fp32 absmax
    # [ceil(N*K/64)] over the flattened weight (uint8 codes with double quantization)
    scale: Tensor
    shape: torch.Size
    dtype: torch.dtype  # dtype of the weight that was quantized
    global_scale: Tensor | None = None  # nvfp4 only, fp32 [1], a divisor (compressed-tensors convention)
    scale_absmax: Tensor | None = None  # nf4 double quantization only: fp32 absmax per 256 scales
    scale_offset: Tensor | None = None  # nf4 double quantization only: fp32 []

    def tensors(self) -> dict[str, Tensor]:
        """The stored tensors by field name (None fields left out)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if isinstance(getattr(self, f.name), Tensor)}

    def nbytes(self) -> int:
        """Bytes held by the packed codes and all scales."""
        return sum(t.numel() * t.element_size() for t in self.tensors().values())

    def to(self, device: torch.device | str) -> "QuantizedTensor":
        moved = {name: t.to(device) for name, t in self.tensors().items()}
        return QuantizedTensor(fmt=self.fmt, shape=self.shape, dtype=self.dtype, **moved)


def check_weight(weight: Tensor, fmt: str, multiple: int, reason: str | None = None) -> tuple[int, int]:
    """Validate a weight for quantization; returns (N, K), or ValueError naming the problem. K must be a multiple
    of `multiple` (the format's block size unless `reason` says otherwise)."""
    if not isinstance(weight, Tensor):
        raise ValueError(f"{fmt}: expected a torch.Tensor, got {type(weight).__name__}")
    if weight.ndim != 2:
        raise ValueError(f"{fmt}: expected a 2-D weight [out_features, in_features], got shape {tuple(weight.shape)}")
    if weight.is_meta:
        raise ValueError(f"{fmt}: the weight is on the meta device (a shape without values, e.g. a model built "
                         f"under init_empty_weights); load its values before quantizing")
    if weight.dtype not in SUPPORTED_DTYPES:
        raise ValueError(f"{fmt}: weight dtype must be bf16, fp16 or fp32, got {weight.dtype}")
    n, k = weight.shape
    if n == 0 or k == 0:
        raise ValueError(f"{fmt}: cannot quantize an empty weight of shape {tuple(weight.shape)}")
    if k % multiple != 0:
        reason = reason or f"the {fmt} block size {multiple} (blocks run along in_features; rlx does not pad)"
        raise ValueError(f"{fmt}: in_features={k} is not a multiple of {reason}; leave this layer out of quant.targets")
    return n, k


def check_finite(amax: Tensor, fmt: str) -> None:
    """amax is any reduction of |w| that propagates inf/nan (block or tensor amax)."""
    if not bool(torch.isfinite(amax).all()):
        raise ValueError(f"{fmt}: weight contains inf or nan; refusing to quantize")
