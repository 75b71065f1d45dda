"""Quantization benchmark: `python -m benchmarks.quant [--size 4096] [--repeats 3] [--tokens 64]`.

Per format, on one random [size, size] bf16 weight, all measured in this run:
  quant_x       reference library's quantize time / rlx's (>1 means rlx is faster);
                nvfp4: compressed-tensors (generate_gparam + calculate_qparams + NVFP4PackedCompressor),
                nf4: bitsandbytes quantize_4bit(quant_type="nf4"), mxfp4: torchao to_mx(fp4)
  bytes_ratio   packed codes + scales / 16-bit bytes of the same weight
  rel_l2        ||W - dequant(W)|| / ||W||
  fwd_ratio     QuantLinear forward time / nn.Linear (bf16) forward time, x [tokens, size]
Runs on CUDA when available (QuantLinear then uses the Triton kernel), else CPU.
"""

import argparse
import statistics
import time
from typing import Callable

import torch

from rlx.quant import QuantLinear, dequantize, quantize


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed(fn: Callable[[], object], device: torch.device, repeats: int) -> float:
    """Median wall seconds of `repeats` calls after one warm-up call."""
    fn()
    _sync(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def reference_nvfp4() -> Callable[[torch.Tensor], object] | None:
    try:
        from compressed_tensors.compressors.nvfp4.base import NVFP4PackedCompressor
        from compressed_tensors.quantization.quant_scheme import NVFP4A16, QuantizationScheme
        from compressed_tensors.quantization.utils.helpers import calculate_qparams, generate_gparam
    except ImportError:
        return None
    scheme = QuantizationScheme(targets=["Linear"], **NVFP4A16)

    def run(w: torch.Tensor):
        global_scale = generate_gparam(w.amin(), w.amax())
        groups = w.unflatten(-1, (-1, 16))
        scale, _ = calculate_qparams(groups.amin(-1), groups.amax(-1), scheme.weights, global_scale=global_scale)
        state = {"weight": w, "weight_scale": scale, "weight_global_scale": global_scale}
        return NVFP4PackedCompressor.compress(state, scheme)

    return run


def reference_nf4() -> Callable[[torch.Tensor], object] | None:
    try:
        import bitsandbytes.functional as bnb_f
    except ImportError:
        return None
    return lambda w: bnb_f.quantize_4bit(w, blocksize=64, quant_type="nf4")


def reference_mxfp4() -> Callable[[torch.Tensor], object] | None:
    try:
        from torchao.prototype.mx_formats.mx_tensor import to_mx
    except ImportError:
        return None
    return lambda w: to_mx(w.contiguous(), torch.float4_e2m1fn_x2, 32)


REFERENCES = {"nvfp4": reference_nvfp4, "nf4": reference_nf4, "mxfp4": reference_mxfp4}


def bench_format(fmt: str, weight: torch.Tensor, x: torch.Tensor, repeats: int) -> dict[str, float | None]:
    device = weight.device
    ours_s = timed(lambda: quantize(weight, fmt), device, repeats)
    reference = REFERENCES[fmt]()
    ref_s = timed(lambda: reference(weight), device, repeats) if reference is not None else None
    qt = quantize(weight, fmt)
    err = (weight.float() - dequantize(qt, torch.float32)).norm() / weight.float().norm()
    dense = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False, device=device, dtype=weight.dtype)
    dense.weight.data.copy_(weight)
    packed = QuantLinear(qt, kernel="auto")
    with torch.no_grad():
        dense_s = timed(lambda: dense(x), device, repeats)
        packed_s = timed(lambda: packed(x), device, repeats)
    return {
        "ours_s": ours_s,
        "ref_s": ref_s,
        "quant_x": None if ref_s is None else ref_s / ours_s,
        "bytes_ratio": qt.nbytes() / (2 * weight.numel()),
        "rel_l2": err.item(),
        "fwd_ratio": packed_s / dense_s,
    }


def main(argv: list[str] | None = None) -> dict[str, dict]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--formats", default="nvfp4,nf4,mxfp4")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    gen = torch.Generator(device="cpu").manual_seed(args.seed)
    weight = (torch.randn(args.size, args.size, generator=gen) * 0.02).to(device=device, dtype=torch.bfloat16)
    x = torch.randn(args.tokens, args.size, generator=gen).to(device=device, dtype=torch.bfloat16)

    print(f"device={device} weight=[{args.size}, {args.size}] bf16 tokens={args.tokens} repeats={args.repeats} "
          f"threads={torch.get_num_threads()}")
    header = f"{'format':7} {'rlx_s':>8} {'ref_s':>8} {'quant_x':>8} {'bytes':>7} {'rel_l2':>8} {'fwd_ratio':>9}"
    print(header)
    results = {}
    for fmt in args.formats.split(","):
        r = bench_format(fmt, weight, x, args.repeats)
        results[fmt] = r
        ref = "n/a" if r["ref_s"] is None else f"{r['ref_s']:.4f}"
        speed = "n/a" if r["quant_x"] is None else f"{r['quant_x']:.2f}"
        print(
            f"{fmt:7} {r['ours_s']:8.4f} {ref:>8} {speed:>8} "
            f"{r['bytes_ratio']:7.4f} {r['rel_l2']:8.4f} {r['fwd_ratio']:9.2f}"
        )
    return results


if __name__ == "__main__":
    main()
