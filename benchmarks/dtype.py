"""fp32 vs bf16 matmuls on this CPU: `python -m benchmarks.dtype [--threads 1] [--repeats 5]`

Which `trainer.dtype` pays here. Times `F.linear` on the shapes of a SmolLM2 decoder layer (256
tokens) in fp32 and in bf16, alternating within each repeat, in process CPU seconds (so a shared
machine skews both alike), and prints the bf16 / fp32 ratio beside the CPU's bf16 flags
(x86 `avx512_bf16`, `amx_bf16`, aarch64 `bf16` in /proc/cpuinfo): without them, oneDNN emulates bf16 and it runs
several times slower than fp32 (docs/lean.md).
"""

from __future__ import annotations

import argparse
import statistics
import time

# (tokens, in_features, out_features) of SmolLM2-135M's q/o, k/v, gate/up and down projections
SHAPES = ((256, 576, 576), (256, 576, 192), (256, 576, 1536), (256, 1536, 576))


def _seconds(dtype, calls: int) -> float:
    import torch
    import torch.nn.functional as F

    gen = torch.Generator().manual_seed(0)
    pairs = [(torch.randn(t, k, generator=gen).to(dtype), torch.randn(n, k, generator=gen).to(dtype))
             for t, k, n in SHAPES]
    for x, w in pairs:  # warm-up: oneDNN picks and caches its kernels
        F.linear(x, w)
    c0 = time.process_time()
    for _ in range(calls):
        for x, w in pairs:
            F.linear(x, w)
    return time.process_time() - c0


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--calls", type=int, default=10, help="calls of every shape per timing")
    a = ap.parse_args(argv)
    import torch

    torch.set_num_threads(a.threads)
    times = {"fp32": [], "bf16": []}
    for _ in range(a.repeats):
        times["fp32"].append(_seconds(torch.float32, a.calls))
        times["bf16"].append(_seconds(torch.bfloat16, a.calls))
    fp32, bf16 = statistics.median(times["fp32"]), statistics.median(times["bf16"])
    from rlx.run.device import cpu_bf16_flags

    flags = cpu_bf16_flags()
    print(f"F.linear on {len(SHAPES)} SmolLM2 layer shapes x {a.calls} calls, {a.threads} thread(s), median of "
          f"{a.repeats}: fp32 {fp32:.3f} CPU-s, bf16 {bf16:.3f} CPU-s, bf16 / fp32 = {bf16 / fp32:.2f}")
    print(f"bf16 instructions: {', '.join(flags) if flags else 'none (bf16 is emulated)'}")
    return {"fp32_s": fp32, "bf16_s": bf16, "ratio": bf16 / fp32, "flags": flags, "times": times}


if __name__ == "__main__":
    main()
