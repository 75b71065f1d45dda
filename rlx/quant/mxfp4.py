"""MXFP4 per the OCP MX spec, with torchao's default ("floor") scale rule (docs/quant.md, Library conventions).

32-element blocks along K share X = 2^(floor(log2(block_amax)) - 2), stored as a biased exponent (uint8,
bias 127, [0, 254]); codes E2M1_RNE(clamp(w / X, ±6)), element 2j in the low nibble, X never below 2^-126."""

import torch
from torch import Tensor

from rlx.quant.fp4 import CHUNK_ELEMENTS, dequantize_rows, e2m1_encode, e2m1_lut, pack_low_first
from rlx.quant.tensor import QuantizedTensor, check_finite, check_weight

BLOCK = 32
E8M0_BIAS = 127
E2M1_MAX_POW2 = 2
_F32_MIN_NORMAL = 2.0**-126


def e8m0_to_float(biased: Tensor) -> Tensor:
    """uint8 biased exponents -> fp32 2^(e - 127), exact (2^-127 for e = 0)."""
    e = biased.to(torch.int32)
    normal = (e << 23).view(torch.float32)  # exponent field e, zero mantissa
    return torch.where(e == 0, torch.full_like(normal, 2.0**-127), normal)


def quantize_mxfp4(weight: Tensor) -> QuantizedTensor:
    """Quantize a [N, K] weight (K a multiple of 32)."""
    n, k = check_weight(weight, "mxfp4", BLOCK)
    blocks = weight.reshape(n, k // BLOCK, BLOCK)  # [N, K/32, 32]
    block_amax = blocks.abs().amax(dim=-1).to(torch.float32)  # [N, K/32]
    check_finite(block_amax, "mxfp4")
    floor_log2 = ((block_amax.view(torch.int32) >> 23) & 0xFF) - E8M0_BIAS
    biased = (floor_log2 - E2M1_MAX_POW2).clamp(-E8M0_BIAS, E8M0_BIAS) + E8M0_BIAS  # [N, K/32] in [0, 254]
    divisor = (biased << 23).view(torch.float32).clamp(min=_F32_MIN_NORMAL)  # fp32 [N, K/32]

    packed = torch.empty(n, k // 2, dtype=torch.uint8, device=weight.device)
    rows = n if weight.is_cuda else max(1, CHUNK_ELEMENTS // k)  # CPU: cache-sized chunks; GPU: one pass
    for r0 in range(0, n, rows):
        scaled = blocks[r0 : r0 + rows].to(torch.float32) / divisor[r0 : r0 + rows, :, None]  # [rows, K/32, 32]
        codes = e2m1_encode(scaled.reshape(-1, k), zero_sign="signbit")
        packed[r0 : r0 + rows] = pack_low_first(codes)
    return QuantizedTensor(fmt="mxfp4", packed=packed, scale=biased.to(torch.uint8), shape=weight.shape,
                           dtype=weight.dtype)


def dequantize_mxfp4(qt: QuantizedTensor, dtype: torch.dtype) -> Tensor:
    """[N, K] weight: code value * 2^(e - 127)."""
    scale = e8m0_to_float(qt.scale)  # fp32 [N, K/32]
    return dequantize_rows(qt.packed, e2m1_lut(qt.packed.device), True, scale, BLOCK, dtype)
