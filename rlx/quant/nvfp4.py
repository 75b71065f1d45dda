"""NVFP4 with compressed-tensors' numerics (min-max observer); dt = the weight dtype, rounded where it rounds:
  gs = fp32(dt(2688 / amax)); s = fp8_e4m3(clamp(gs * dt(block_amax / 6), ±448)), 0 -> 0.125;
  q = E2M1_RNE(clamp(fp32(w) / fp32(s / gs), ±6)) per 16 along K (2j low nibble); w' = q * fp32(s / gs).
Edge cases (amax clamps, non-finite gs): docs/quant.md, Library conventions."""

import math

import torch
from torch import Tensor

from rlx.quant.fp4 import CHUNK_ELEMENTS, E2M1_MAX, dequantize_rows, e2m1_encode, e2m1_lut, pack_low_first
from rlx.quant.tensor import QuantizedTensor, check_finite, check_weight

BLOCK = 16
FP8_E4M3_MAX = 448.0
ZERO_SCALE_REPLACEMENT = 0.125  # compressed-tensors replaces a zero fp8 scale by the fp8 "eps" 0.125


def nvfp4_global_scale(amax: Tensor) -> Tensor:
    """fp32 [1] global scale from a 0-dim amax in the weight dtype (compressed-tensors' generate_gparam)."""
    amax = torch.clamp(amax, min=torch.finfo(amax.dtype).tiny)
    gs = (FP8_E4M3_MAX * E2M1_MAX) / amax  # Tensor.__rtruediv__: dt(dt(1/amax) * 2688)
    gs = torch.nan_to_num(gs, nan=1.0, posinf=1.0, neginf=1.0)
    return gs.to(torch.float32).reshape(1)


def check_global_scale(global_scale, dtype: torch.dtype) -> Tensor:
    """A caller's global scale as fp32 [1] (a number is taken as one), or ValueError naming it. It must be finite
    and >= 2688 / finfo(dtype).max, else code * s / gs overflows to inf (and inf * 0 to NaN) from finite weights."""
    if isinstance(global_scale, (int, float)) and not isinstance(global_scale, bool):
        global_scale = torch.tensor([float(global_scale)], dtype=torch.float32)
    if not isinstance(global_scale, Tensor):
        raise ValueError(f"nvfp4: global_scale must be an fp32 tensor with one element (or a number), got a "
                         f"{type(global_scale).__name__}")
    if global_scale.is_meta or global_scale.numel() != 1 or global_scale.dtype != torch.float32:
        raise ValueError(f"nvfp4: global_scale must be an fp32 tensor with one element, got {global_scale!r}")
    value = float(global_scale.reshape(()))
    low = FP8_E4M3_MAX * E2M1_MAX / torch.finfo(dtype).max
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"nvfp4: global_scale must be finite and > 0, got {value}")
    if value < low:
        raise ValueError(f"nvfp4: global_scale {value:g} is below {low:.3g} = 2688 / the largest {dtype}: the "
                         f"dequantized weights would overflow to inf / NaN")
    return global_scale


def shared_global_scale(weights: list[Tensor]) -> Tensor:
    """One global scale for layers vLLM fuses (q/k/v, gate/up): the smallest member scale (llm-compressor)."""
    scales = [nvfp4_global_scale(w.abs().amax()) for w in weights]
    return torch.min(torch.cat(scales)).reshape(1)


def _block_scales(block_amax: Tensor, global_scale: Tensor) -> Tensor:
    """fp32 [N, K/16] block scales whose values are exactly representable in fp8 e4m3."""
    six = torch.tensor(E2M1_MAX, dtype=block_amax.dtype, device=block_amax.device)
    local = block_amax / six  # dt(block_amax / 6)
    scale = global_scale * local  # fp32
    scale = torch.clamp(scale, -FP8_E4M3_MAX, FP8_E4M3_MAX).to(torch.float8_e4m3fn).to(torch.float32)
    return torch.where(scale == 0, torch.full_like(scale, ZERO_SCALE_REPLACEMENT), scale)


def quantize_nvfp4(weight: Tensor, global_scale: Tensor | None = None) -> QuantizedTensor:
    """Quantize a [N, K] weight (K a multiple of 16). global_scale: fp32 [1] to share a fused group's scale."""
    n, k = check_weight(weight, "nvfp4", BLOCK)
    blocks = weight.reshape(n, k // BLOCK, BLOCK)  # [N, K/16, 16]
    block_amax = blocks.abs().amax(dim=-1)  # [N, K/16] in dt
    check_finite(block_amax, "nvfp4")
    if global_scale is None:
        global_scale = nvfp4_global_scale(block_amax.amax())
    else:
        global_scale = check_global_scale(global_scale, weight.dtype)
    global_scale = global_scale.reshape(1).to(weight.device)
    scale = _block_scales(block_amax, global_scale)  # fp32 [N, K/16]
    effective = scale / global_scale  # fp32 [N, K/16], what each code is multiplied by

    packed = torch.empty(n, k // 2, dtype=torch.uint8, device=weight.device)
    rows = n if weight.is_cuda else max(1, CHUNK_ELEMENTS // k)  # CPU: cache-sized chunks; GPU: one pass
    for r0 in range(0, n, rows):
        scaled = blocks[r0 : r0 + rows] / effective[r0 : r0 + rows, :, None]  # fp32 [rows, K/16, 16]
        codes = e2m1_encode(scaled.reshape(-1, k), zero_sign="negative")  # [rows, K]
        packed[r0 : r0 + rows] = pack_low_first(codes)
    return QuantizedTensor(fmt="nvfp4", packed=packed, scale=scale.to(torch.float8_e4m3fn), shape=weight.shape,
                           dtype=weight.dtype, global_scale=global_scale)


def dequantize_nvfp4(qt: QuantizedTensor, dtype: torch.dtype) -> Tensor:
    """[N, K] weight: code value * fp32(scale / global_scale), rounded once to dtype."""
    effective = qt.scale.to(torch.float32) / qt.global_scale  # fp32 [N, K/16]
    return dequantize_rows(qt.packed, e2m1_lut(qt.packed.device), True, effective, BLOCK, dtype)
