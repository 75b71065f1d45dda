"""NF4 with QLoRA / bitsandbytes numerics (its pure-torch path; docs/quant.md, Library conventions).

64-element blocks of the row-major flattened weight (the last may be shorter), fp32 absmax, codes = nearest NF4
value of clamp(w * (1 / absmax), -1, 1) (ties low), 2i in the HIGH nibble; double quantization on a 256-block map."""

import torch
from torch import Tensor

from rlx.quant.fp4 import CHUNK_ELEMENTS, decode_packed, dequantize_rows, pack_high_first
from rlx.quant.tensor import QuantizedTensor, check_finite, check_weight

BLOCK = 64
SCALE_BLOCK = 256  # double quantization block over the absmax values

# The NF4 data type of QLoRA (quantiles of N(0, 1), as hard-coded in bitsandbytes).
NF4_VALUES = (-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
              -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
              0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941, 0.7229568362236023,
              1.0)
_CACHE: dict[tuple[str, torch.device], Tensor] = {}


def nf4_values(device: torch.device | str = "cpu") -> Tensor:
    """fp32 [16], sorted."""
    key = ("nf4", torch.device(device))
    if key not in _CACHE:
        _CACHE[key] = torch.tensor(NF4_VALUES, dtype=torch.float32, device=device)
    return _CACHE[key]


def _nf4_midpoints(device: torch.device) -> Tensor:
    key = ("nf4_mid", device)
    if key not in _CACHE:
        values = nf4_values(device)
        _CACHE[key] = (values[:-1] + values[1:]) / 2
    return _CACHE[key]


def dynamic_map(device: torch.device | str = "cpu") -> Tensor:
    """bitsandbytes' signed 8-bit dynamic map, fp32 [256] sorted: for i = 0..6, 2^i linearly spaced bin means
    in [0.1, 1] scaled by 10^(i-6), both signs; plus 0 and 1."""
    key = ("dynamic", torch.device(device))
    if key not in _CACHE:
        values: list[float] = []
        for i in range(7):
            edges = torch.linspace(0.1, 1, 2**i + 1, dtype=torch.float32)
            means = (edges[:-1] + edges[1:]) / 2.0  # fp32, scaled in fp32 below
            values += ((10 ** (i - 6)) * means).tolist()
            values += (-(10 ** (i - 6)) * means).tolist()
        values += [0.0, 1.0]
        _CACHE[key] = torch.tensor(sorted(values), dtype=torch.float32, device=device)
    return _CACHE[key]


def _quantize_scales(absmax: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Double quantization of fp32 [B] absmax -> (uint8 codes [B], fp32 absmax [ceil(B/256)], fp32 offset []), as
    bitsandbytes' pure-torch kernel: full blocks times 1/absmax, a partial tail divided by it; ties go low."""
    offset = absmax.mean()
    centred = absmax - offset  # [B]
    n = centred.numel()
    full = n - n % SCALE_BLOCK
    blocks = centred[:full].view(-1, SCALE_BLOCK)  # [B2, 256]
    block_absmax = blocks.abs().amax(dim=-1)
    normed = torch.clamp(blocks * (1.0 / block_absmax.clamp(min=1e-38))[:, None], -1, 1).flatten()
    if full < n:
        tail_absmax = centred[full:].abs().amax().clamp(min=1e-38)
        block_absmax = torch.cat([block_absmax, tail_absmax[None]])
        normed = torch.cat([normed, torch.clamp(centred[full:] / tail_absmax, -1, 1)])
    code = dynamic_map(absmax.device)
    midpoints = (code[:-1] + code[1:]) / 2
    codes = torch.bucketize(normed, midpoints, out_int32=True).to(torch.uint8)
    return codes, block_absmax, offset


def nf4_absmax(qt: QuantizedTensor) -> Tensor:
    """fp32 [ceil(N*K/64)] absmax, from plain storage or double-quantized codes."""
    if qt.scale_absmax is None:
        return qt.scale
    codes = qt.scale.to(torch.int64)
    values = dynamic_map(codes.device)[codes]
    block = torch.arange(codes.numel(), device=codes.device) // SCALE_BLOCK
    return values * qt.scale_absmax[block] + qt.scale_offset


def _nearest_nf4(normed: Tensor, midpoints: list[float]) -> Tensor:
    """Index of the nearest NF4 value (midpoint ties go low) = number of midpoints strictly below."""
    codes = torch.zeros(normed.shape, dtype=torch.uint8, device=normed.device)
    for midpoint in midpoints:
        codes += normed > midpoint
    return codes


def quantize_nf4(weight: Tensor, double_quant: bool = False) -> QuantizedTensor:
    """Quantize a [N, K] weight (K even); blocks of 64 run over the flattened weight."""
    n, k = check_weight(weight, "nf4", 2, reason="2 (two codes per byte)")
    flat = weight.reshape(-1)
    numel = flat.numel()
    full = numel - numel % BLOCK
    blocks = flat[:full].view(-1, BLOCK)  # [B, 64]
    absmax = blocks.abs().amax(dim=-1).to(torch.float32)  # [B]
    check_finite(absmax, "nf4")
    inv_absmax = absmax.clamp(min=1e-38).reciprocal()  # bitsandbytes multiplies full blocks by 1/absmax
    midpoints = _nf4_midpoints(weight.device).tolist()
    packed = torch.empty(numel // 2, dtype=torch.uint8, device=weight.device)
    step = blocks.shape[0] if weight.is_cuda else max(1, CHUNK_ELEMENTS // BLOCK)  # CPU: cache-sized chunks
    for b0 in range(0, blocks.shape[0], step):
        b1 = min(b0 + step, blocks.shape[0])
        normed = torch.clamp(blocks[b0:b1].to(torch.float32) * inv_absmax[b0:b1, None], -1, 1)  # [b1-b0, 64]
        packed[b0 * BLOCK // 2 : b1 * BLOCK // 2] = pack_high_first(_nearest_nf4(normed, midpoints)).flatten()
    if full < numel:
        tail = flat[full:].to(torch.float32)
        tail_absmax = tail.abs().amax().clamp(min=1e-38)
        check_finite(tail_absmax, "nf4")
        normed = torch.clamp(tail / tail_absmax, -1, 1)
        packed[full // 2 :] = pack_high_first(_nearest_nf4(normed, midpoints))
        absmax = torch.cat([absmax, tail_absmax[None]])
    scale, extra = absmax, {}
    if double_quant:
        scale, scale_absmax, offset = _quantize_scales(absmax)
        if not (bool(torch.isfinite(scale_absmax).all()) and bool(torch.isfinite(offset))):
            raise ValueError(f"nf4: double quantization overflows fp32 for this weight (|w| up to "
                             f"{float(absmax.max()):.3g}); quantize it with double_quant=False")
        extra = {"scale_absmax": scale_absmax, "scale_offset": offset}
    return QuantizedTensor(fmt="nf4", packed=packed.view(n, k // 2), scale=scale, shape=weight.shape,
                           dtype=weight.dtype, **extra)


def dequantize_nf4(qt: QuantizedTensor, dtype: torch.dtype) -> Tensor:
    """[N, K] weight: NF4 value * absmax of its flattened 64-block (fp32), rounded once to dtype."""
    n, k = qt.shape
    absmax = nf4_absmax(qt)  # fp32 [ceil(N*K/64)]
    if k % BLOCK == 0:  # blocks are row-aligned
        return dequantize_rows(qt.packed, nf4_values(qt.packed.device), False, absmax.view(n, -1), BLOCK, dtype)
    values = decode_packed(qt.packed, nf4_values(qt.packed.device), low_first=False).reshape(-1)  # fp32 [N*K]
    full = values.numel() - values.numel() % BLOCK
    out = (values[:full].view(-1, BLOCK) * absmax[: full // BLOCK, None]).reshape(-1)
    if full < values.numel():
        out = torch.cat([out, values[full:] * absmax[-1]])
    return out.view(n, k).to(dtype)
