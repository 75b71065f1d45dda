"""Triton fused dequantize + matmul for QuantLinear on GPU (docs/quant.md, QuantLinear and kernels; docs/gpu.md).

out[M, N] = x[M, K] @ W[N, K]^T (+ bias): a packed byte holds elements 2j and 2j+1 of a row, so x splits into even
and odd columns (two dots per K tile) and W is never materialized; W's values are the torch path's, bit for bit."""

import functools
import os

import torch
from torch import Tensor

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - triton is optional on CPU
    triton = None
    tl = None

from rlx.quant.formats import dequantize
from rlx.quant.fp4 import e2m1_lut
from rlx.quant.nf4 import BLOCK as NF4_BLOCK
from rlx.quant.nf4 import nf4_absmax, nf4_values
from rlx.quant.tensor import QuantizedTensor

# format id, elements per scale, element 2j in the high nibble, scale blocks run over the flattened weight
_FORMAT_IDS = {"nvfp4": (0, 16, False, False), "mxfp4": (1, 32, False, False), "nf4": (2, NF4_BLOCK, True, True)}


def available() -> bool:
    return triton is not None


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


if triton is not None:

    @triton.jit
    def _decode_e4m3(bits):
        """uint8 fp8 e4m3 bit patterns (positive) -> fp32."""
        b = bits.to(tl.int32)
        exp = (b >> 3) & 0xF
        man = b & 0x7
        normal = (((exp + 120) << 23) | (man << 20)).to(tl.float32, bitcast=True)
        subnormal = man.to(tl.float32) * 0.001953125  # m * 2^-9
        return tl.where(exp == 0, subnormal, normal)

    @triton.jit
    def _decode_e8m0(bits):
        """uint8 biased exponents -> fp32 2^(e-127)."""
        b = bits.to(tl.int32)
        normal = (b << 23).to(tl.float32, bitcast=True)
        return tl.where(b == 0, 5.877471754111438e-39, normal)

    @triton.jit
    def _round_to_bf16(f):
        """fp32 -> fp32 holding the round-to-nearest-even bf16 value, so the later .to(bf16) is exact
        (the CPU interpreter truncates in fp32 -> bf16 casts; on GPU this equals the native cast)."""
        b = f.to(tl.int32, bitcast=True)
        b = (b + 0x7FFF + ((b >> 16) & 1)) & -65536
        return b.to(tl.float32, bitcast=True)

    @triton.jit
    def _block_weights(packed_ptr, scale_ptr, lut_ptr, gscale, rn, kh, w_mask, K, stride_pn, stride_pk,
                       stride_sn, stride_sk, FMT: tl.constexpr, GROUP: tl.constexpr, HIGH_FIRST: tl.constexpr,
                       FLAT_SCALE: tl.constexpr):
        """The dequantized fp32 weights of one block of byte columns `kh` for rows `rn`: (even, odd)
        elements, each [BN, BKH], exactly what the torch dequantize computes."""
        packed = tl.load(packed_ptr + rn[:, None] * stride_pn + kh[None, :] * stride_pk, mask=w_mask, other=0)
        low = (packed & 0xF).to(tl.int32)
        high = ((packed >> 4) & 0xF).to(tl.int32)
        if HIGH_FIRST:
            first = high
            second = low
        else:
            first = low
            second = high
        v_even = tl.load(lut_ptr + first)  # fp32 [BN, BKH], element 2j
        v_odd = tl.load(lut_ptr + second)  # element 2j+1
        if FLAT_SCALE:  # nf4: 64-blocks of the row-major flattened weight
            s_offsets = (rn[:, None] * K + 2 * kh[None, :]) // GROUP
        else:
            s_offsets = rn[:, None] * stride_sn + ((2 * kh) // GROUP)[None, :] * stride_sk
        s_raw = tl.load(scale_ptr + s_offsets, mask=w_mask, other=0)
        if FMT == 0:
            scale = tl.div_rn(_decode_e4m3(s_raw), gscale)
        elif FMT == 1:
            scale = _decode_e8m0(s_raw)
        else:
            scale = s_raw
        return v_even * scale, v_odd * scale

    @triton.jit
    def _quant_matmul_kernel(
        x_ptr, packed_ptr, scale_ptr, gscale_ptr, lut_ptr, bias_ptr, out_ptr,
        M, N, K, kh_per_split,
        stride_xm, stride_xk, stride_pn, stride_pk, stride_sn, stride_sk, stride_ok, stride_om, stride_on,
        FMT: tl.constexpr, GROUP: tl.constexpr, HIGH_FIRST: tl.constexpr, FLAT_SCALE: tl.constexpr,
        HAS_BIAS: tl.constexpr, UPCAST_DOT: tl.constexpr, BF16: tl.constexpr, SPLIT_K: tl.constexpr,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_KH: tl.constexpr,
    ):
        """out[pid_k] (+)= x[:, K range of pid_k] @ W[:, same range]^T. Without SPLIT_K there is one K range
        and out is the result in x's dtype; with it, out is an fp32 [splits, M, N] buffer of partial sums."""
        # int64 row indices: row * row stride passes 2^31 once M*K, M*N or N*K does
        rm = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)  # [BM]
        rn = tl.program_id(1).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)  # [BN]
        pid_k = tl.program_id(2)
        mask_m = rm < M
        mask_n = rn < N
        half_k = K // 2
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        if FMT == 0:
            gscale = tl.load(gscale_ptr)
        else:
            gscale = 1.0  # unused: only NVFP4 has a global scale
        kh_start = pid_k * kh_per_split  # a multiple of BLOCK_KH, so the ranges tile K without overlap
        kh_end = tl.minimum(kh_start + kh_per_split, half_k)
        for kh0 in range(kh_start, kh_end, BLOCK_KH):
            kh = kh0 + tl.arange(0, BLOCK_KH)  # byte columns [BKH]
            mask_k = kh < half_k
            w_mask = mask_n[:, None] & mask_k[None, :]
            w_even, w_odd = _block_weights(packed_ptr, scale_ptr, lut_ptr, gscale, rn, kh, w_mask, K, stride_pn,
                                           stride_pk, stride_sn, stride_sk, FMT, GROUP, HIGH_FIRST, FLAT_SCALE)
            x_mask = mask_m[:, None] & mask_k[None, :]
            x_even = tl.load(x_ptr + rm[:, None] * stride_xm + (2 * kh)[None, :] * stride_xk, mask=x_mask, other=0.0)
            x_odd = tl.load(x_ptr + rm[:, None] * stride_xm + (2 * kh + 1)[None, :] * stride_xk, mask=x_mask, other=0.0)
            if BF16:
                w_even = _round_to_bf16(w_even)
                w_odd = _round_to_bf16(w_odd)
            w_even = w_even.to(x_even.dtype)
            w_odd = w_odd.to(x_odd.dtype)
            if UPCAST_DOT:  # fp32 inputs or the CPU interpreter (whose bf16 dot is wrong): exact fp32 products
                acc += tl.dot(x_even.to(tl.float32), tl.trans(w_even.to(tl.float32)), input_precision="ieee")
                acc += tl.dot(x_odd.to(tl.float32), tl.trans(w_odd.to(tl.float32)), input_precision="ieee")
            else:  # bf16/fp16 tensor-core dot, fp32 accumulation
                acc += tl.dot(x_even, tl.trans(w_even))
                acc += tl.dot(x_odd, tl.trans(w_odd))
        if HAS_BIAS:  # added once: by the first K range
            bias = tl.load(bias_ptr + rn, mask=mask_n, other=0.0).to(tl.float32)
            acc += tl.where(pid_k == 0, bias, 0.0)[None, :]
        if BF16 and not SPLIT_K:  # partial sums stay fp32; torch rounds their total
            acc = _round_to_bf16(acc)
        out_ptrs = out_ptr + pid_k.to(tl.int64) * stride_ok + rm[:, None] * stride_om + rn[None, :] * stride_on
        tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])


def _kernel_operands(qt: QuantizedTensor, device: torch.device):
    """(scale tensor, global-scale tensor, 16-entry fp32 lut) in the form the kernel reads."""
    if qt.fmt == "nvfp4":
        return qt.scale.view(torch.uint8), qt.global_scale, e2m1_lut(device)
    if qt.fmt == "mxfp4":
        return qt.scale, qt.scale, e2m1_lut(device)
    if qt.fmt == "nf4":
        absmax = nf4_absmax(qt).to(torch.float32).contiguous()  # [ceil(N*K/64)], plain or double-quantized
        return absmax.view(-1, 1), absmax, nf4_values(device)
    raise ValueError(f"no triton kernel for format {qt.fmt!r}")


BLOCK_N, BLOCK_KH = 64, 32
DECODE_ROWS = 16  # M up to this runs 16-row tiles (and may split K); larger M runs 64-row tiles
MAX_SPLIT_K = 16
MIN_KH_BLOCKS_PER_SPLIT = 4  # each K range keeps a few loop iterations to hide its loads


def block_m_for(m: int) -> int:
    return 16 if m <= DECODE_ROWS else 64


@functools.lru_cache(maxsize=None)
def _sm_count(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def split_k_for(m: int, n: int, k: int, device: torch.device) -> int:
    """How many K ranges a decode-sized call splits into: about two programs per SM, where ceil(N / 64) tiles alone
    would leave most SMs idle. A heuristic, not tuned on a GPU (docs/gpu.md)."""
    if m > DECODE_ROWS or device.type != "cuda":
        return 1
    tiles = triton.cdiv(n, BLOCK_N)
    kh_blocks = triton.cdiv(k // 2, BLOCK_KH)
    wanted = triton.cdiv(2 * _sm_count(device.index if device.index is not None else torch.cuda.current_device()),
                         tiles)
    return max(1, min(wanted, kh_blocks // MIN_KH_BLOCKS_PER_SPLIT, MAX_SPLIT_K))


def quant_matmul(x: Tensor, qt: QuantizedTensor, bias: Tensor | None = None, split_k: int | None = None) -> Tensor:
    """x [..., K] -> [..., N] with the fused kernel (no autograd: quant_linear). split_k: K ranges summed afterwards
    in fp32 (None: split_k_for's choice; 1: one pass, no buffer)."""
    if triton is None:
        raise RuntimeError("triton is not importable")
    n, k = qt.shape
    if x.shape[-1] != k:
        raise ValueError(f"input has {x.shape[-1]} features, the quantized weight expects {k}")
    x2 = x.reshape(-1, k)  # [M, K]
    m = x2.shape[0]
    kh_blocks = triton.cdiv(k // 2, BLOCK_KH)
    split = split_k_for(m, n, k, x.device) if split_k is None else max(1, min(int(split_k), kh_blocks))
    kh_per_split = triton.cdiv(kh_blocks, split) * BLOCK_KH
    split = triton.cdiv(k // 2, kh_per_split)  # no empty K range
    # one pass writes the result; a split writes fp32 partial sums [split, M, N], summed below
    out = torch.empty(m, n, dtype=x.dtype, device=x.device) if split == 1 else \
        torch.empty(split, m, n, dtype=torch.float32, device=x.device)
    fmt_id, group, high_first, flat_scale = _FORMAT_IDS[qt.fmt]
    scale, gscale, lut = _kernel_operands(qt, x.device)
    block_m = block_m_for(m)
    grid = (triton.cdiv(m, block_m), triton.cdiv(n, BLOCK_N), split)
    _quant_matmul_kernel[grid](
        x2, qt.packed, scale, gscale, lut, bias if bias is not None else out, out,
        m, n, k, kh_per_split,
        x2.stride(0), x2.stride(1), qt.packed.stride(0), qt.packed.stride(1),
        scale.stride(0), scale.stride(1), out.stride(0) if split > 1 else 0, out.stride(-2), out.stride(-1),
        FMT=fmt_id, GROUP=group, HIGH_FIRST=high_first, FLAT_SCALE=flat_scale, HAS_BIAS=bias is not None,
        UPCAST_DOT=x.dtype == torch.float32 or _interpreting(), BF16=x.dtype == torch.bfloat16,
        SPLIT_K=split > 1, BLOCK_M=block_m, BLOCK_N=BLOCK_N, BLOCK_KH=BLOCK_KH,
    )
    if split > 1:
        out = out.sum(0).to(x.dtype)  # a fixed order: the same x gives the same bits, unlike atomics
    return out.reshape(*x.shape[:-1], n)


class _QuantLinearFn(torch.autograd.Function):
    """Forward with the fused kernel; backward dx = dy @ W (W dequantized in torch). W and bias are frozen."""

    @staticmethod
    def forward(ctx, x: Tensor, qt: QuantizedTensor, bias: Tensor | None) -> Tensor:
        ctx.qt = qt
        return quant_matmul(x, qt, bias)

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        weight = dequantize(ctx.qt, grad_out.dtype)  # [N, K]
        return grad_out @ weight, None, None


def quant_linear(x: Tensor, qt: QuantizedTensor, bias: Tensor | None = None) -> Tensor:
    """Differentiable (w.r.t. x) fused quantized linear."""
    if bias is not None:
        bias = bias.to(x.dtype)
    return _QuantLinearFn.apply(x, qt, bias)
