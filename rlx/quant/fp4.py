"""FP4 E2M1 codes and nibble packing, shared by NVFP4 and MXFP4: bit 3 the sign, bits 0-2 index the magnitudes
0, 0.5, 1, 1.5, 2, 3, 4, 6; round-to-nearest-even, saturating at 6."""

import torch
from torch import Tensor

E2M1_MAGNITUDES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
E2M1_MAX = 6.0
CHUNK_ELEMENTS = 1 << 22  # CPU chunk: bounds fp32 temporaries; few chunks = few thread syncs

# (threshold, inclusive): |x| above the threshold (or equal, when inclusive) moves one code up. Ties go to the
# even code (0, 1, 2, 4 have an even index): 0.25->0, 0.75->1, 1.25->1, 1.75->2, 2.5->2, 3.5->4, 5->4.
_RNE_STEPS = ((0.25, False), (0.75, True), (1.25, False), (1.75, True), (2.5, False), (3.5, True), (5.0, False))

_LUT_CACHE: dict[torch.device, Tensor] = {}


def e2m1_lut(device: torch.device | str = "cpu") -> Tensor:
    """Value of each of the 16 codes, fp32 [16] (codes 8..15 are the negatives)."""
    device = torch.device(device)
    if device not in _LUT_CACHE:
        mags = torch.tensor(E2M1_MAGNITUDES, dtype=torch.float32)
        _LUT_CACHE[device] = torch.cat([mags, -mags]).to(device)
    return _LUT_CACHE[device]


def e2m1_encode(x: Tensor, *, zero_sign: str) -> Tensor:
    """Round fp32 values (already divided by their scale) to E2M1 codes, uint8 of x's shape. zero_sign sets the sign
    of a value rounding to zero: "negative" for x < 0 (compressed-tensors), "signbit" copies it (torchao: -0.0 -> 8)."""
    mag_abs = x.abs()
    code = torch.zeros(x.shape, dtype=torch.uint8, device=x.device)
    for threshold, inclusive in _RNE_STEPS:
        code += (mag_abs >= threshold) if inclusive else (mag_abs > threshold)
    if zero_sign == "negative":
        negative = x < 0
    elif zero_sign == "signbit":
        negative = torch.signbit(x)
    else:
        raise ValueError(f"zero_sign must be 'negative' or 'signbit', got {zero_sign!r}")
    code |= negative.to(torch.uint8) << 3
    return code


def pack_low_first(codes: Tensor) -> Tensor:
    """[..., K] 4-bit codes -> [..., K/2] bytes; element 2j in the low nibble (compressed-tensors order)."""
    return codes[..., 0::2] | (codes[..., 1::2] << 4)


def pack_high_first(codes: Tensor) -> Tensor:
    """[..., K] 4-bit codes -> [..., K/2] bytes; element 2j in the high nibble (bitsandbytes order)."""
    return (codes[..., 0::2] << 4) | codes[..., 1::2]


_PAIR_LUT_CACHE: dict[tuple, tuple[Tensor, torch.dtype]] = {}
_PAIR_VIEW = {torch.bfloat16: torch.int32, torch.float32: torch.int64}


def _pair_lut(values: Tensor, low_first: bool) -> tuple[Tensor, torch.dtype]:
    """[256] table, one entry per byte value: its two code values (element order) viewed as one integer; `values`
    is a cached code table (e2m1_lut, nf4_values), stored in bf16 where exact (E2M1), else fp32 (NF4)."""
    key = (values.data_ptr(), values.device, low_first)
    if key not in _PAIR_LUT_CACHE:
        exact_bf16 = bool((values.to(torch.bfloat16).to(torch.float32) == values).all())
        dtype = torch.bfloat16 if exact_bf16 else torch.float32
        byte = torch.arange(256, device=values.device)
        low, high = values[byte & 0x0F], values[byte >> 4]
        pair = torch.stack((low, high) if low_first else (high, low), dim=-1).to(dtype)  # [256, 2]
        _PAIR_LUT_CACHE[key] = (pair.contiguous().view(_PAIR_VIEW[dtype]).view(256), dtype)
    return _PAIR_LUT_CACHE[key]


def decode_packed(packed: Tensor, values: Tensor, low_first: bool) -> Tensor:
    """uint8 [..., K/2] -> [..., K] code values (bf16 when exact, else fp32): one row gather per byte."""
    lut, dtype = _pair_lut(values, low_first)
    index = packed.reshape(-1).to(torch.int32)
    pairs = torch.index_select(lut, 0, index)  # [numel] integers, each two values
    return pairs.view(dtype).view(*packed.shape[:-1], packed.shape[-1] * 2)


def dequantize_rows(packed: Tensor, values: Tensor, low_first: bool, scale: Tensor, block: int,
                    dtype: torch.dtype) -> Tensor:
    """[N, K/2] bytes + fp32 [N, K/block] scales -> [N, K] in dtype: dtype(fp32(value * scale)).
    On CPU it works in chunks of CHUNK_ELEMENTS (bounded fp32 temporaries, faster than one pass)."""
    n, k = packed.shape[0], packed.shape[1] * 2
    out = torch.empty(n, k, dtype=dtype, device=packed.device)
    rows = n if packed.is_cuda else max(1, CHUNK_ELEMENTS // k)
    for r0 in range(0, n, rows):
        codes = decode_packed(packed[r0 : r0 + rows], values, low_first)  # [rows, K]
        scaled = codes.view(-1, k // block, block) * scale[r0 : r0 + rows, :, None]  # fp32
        out[r0 : r0 + rows] = scaled.view(-1, k)
    return out
