"""Part 2 of the GPU check: rlx's Triton fused dequant-matmul against the torch path, per format, shape and dtype."""

from __future__ import annotations

import time

from benchmarks.gpu_check.common import Budget, Recorder, _cuda_available, _version

# ----------------------------------------------------------------------------------------------
# part 2: Triton kernel on the GPU


# (format, quantize kwargs, N, K): the interpreter test's shapes, then 7B projection shapes
TRITON_CASES = [
    ("nvfp4", {}, 20, 32), ("mxfp4", {}, 20, 32), ("nf4", {}, 20, 64), ("nf4", {"double_quant": True}, 12, 48),
    ("nvfp4", {}, 4608, 3584), ("nvfp4", {}, 3584, 18944), ("mxfp4", {}, 4096, 4096), ("nf4", {}, 4096, 4096),
]
TRITON_M = (1, 2, 64, 300)
TOLERANCE = {"float32": 1e-5, "bfloat16": 1e-2, "float16": 2e-3}  # max |diff| / max |reference|


def triton_input(case: tuple, device: str):
    """The QuantizedTensor of one TRITON_CASES entry, built on `device` (seeded by its shape)."""
    import torch

    from rlx.quant import quantize

    fmt, kw, n, k = case
    gen = torch.Generator().manual_seed(n * 100_003 + k)
    return quantize((torch.randn(n, k, generator=gen) * 0.02).to(device), fmt, **kw)


def _cuda_time(fn, repeats: int = 20) -> float:
    """Median seconds of fn() on the GPU (CUDA events), after 3 warm-ups."""
    import torch

    for _ in range(3):
        fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return sorted(times)[len(times) // 2]


def part_triton(args, rec: Recorder, budget: Budget) -> None:
    import torch

    from rlx.quant import triton_kernels as tk

    if not tk.available():
        rec.skipped("2.triton", "triton is not importable")
        return
    if not _cuda_available():
        small = [triton_input(c, "cpu") for c in TRITON_CASES if c[2] * c[3] <= 1 << 16]  # no-GPU check
        rec.skipped("2.triton", f"no CUDA device (kernel module imported, {len(small)} of {len(TRITON_CASES)} "
                                "quantized inputs built on the CPU)")
        return
    if tk._interpreting():
        rec.skipped("2.triton", "TRITON_INTERPRET is set: the kernel would run in the interpreter, not on the GPU")
        return
    torch.set_float32_matmul_precision("highest")  # fp32 reference matmuls without TF32
    t0 = time.perf_counter()
    tk.quant_matmul(torch.ones(1, 32, device="cuda", dtype=torch.bfloat16), triton_input(TRITON_CASES[0], "cuda"))
    torch.cuda.synchronize()
    rec.passed("2.triton.compile", {"first_call_s": time.perf_counter() - t0,
                                    "gpu": torch.cuda.get_device_name(), "triton": _version("triton")})
    triton_checks(TRITON_CASES, "cuda", rec, budget, timing=True)


def _case_figures(qt, dtype, n: int, k: int, gen, device: str, timing: bool) -> tuple[bool, dict]:
    """(passed, figures) of one case in one dtype: decode exactness, matmul error, gradient, optional speed."""
    import torch

    from rlx.quant import dequantize
    from rlx.quant import triton_kernels as tk

    dname = str(dtype).removeprefix("torch.")
    w = dequantize(qt, dtype)  # [N, K], the torch path's weight
    figures: dict = {}
    ok = True
    if k <= 4096:  # identity input: the output is the kernel's decoded weight, bit for bit
        decoded = tk.quant_matmul(torch.eye(k, dtype=dtype, device=device), qt).T
        figures["decode_max_abs"] = (decoded.float() - w.float()).abs().max().item()
        figures["decode_exact"] = bool(torch.equal(decoded, w))
        ok &= figures["decode_exact"]
    worst = 0.0
    for m in TRITON_M:
        x = torch.randn(m, k, generator=gen, device=device).to(dtype)
        bias = torch.randn(n, generator=gen, device=device).to(dtype)
        out = tk.quant_matmul(x, qt, bias)
        ref = torch.addmm(bias.float(), x.float(), w.float().T)  # fp32 reference of the torch path
        diff = (out.float() - ref).abs().max().item()
        rel = diff / max(ref.abs().max().item(), 1e-30)
        figures[f"max_abs_m{m}"] = diff
        worst = max(worst, rel)
    figures["worst_rel"] = worst
    ok &= worst <= TOLERANCE[dname]
    if dtype == torch.bfloat16:  # gradient w.r.t. x through quant_linear vs torch
        x = torch.randn(3, k, generator=gen, device=device).to(dtype).requires_grad_(True)
        (g,) = torch.autograd.grad(tk.quant_linear(x, qt).float().square().sum(), x)
        x_ref = x.detach().clone().requires_grad_(True)
        (g_ref,) = torch.autograd.grad(torch.nn.functional.linear(x_ref, w).float().square().sum(), x_ref)
        scale = g_ref.float().abs().max().clamp_min(1e-30)
        figures["grad_rel"] = ((g.float() - g_ref.float()).abs().max() / scale).item()
        ok &= figures["grad_rel"] <= 5e-2
    if timing and n * k >= 1 << 22 and dtype == torch.bfloat16:  # speed: torch path, dense bf16
        for m in (2, 64):
            x = torch.randn(m, k, generator=gen, device=device).to(dtype)
            t_tri = _cuda_time(lambda: tk.quant_matmul(x, qt))
            t_deq = _cuda_time(lambda: torch.nn.functional.linear(x, dequantize(qt, dtype)))
            t_bf16 = _cuda_time(lambda: torch.nn.functional.linear(x, w))
            figures[f"us_triton_m{m}"] = t_tri * 1e6
            figures[f"triton_over_bf16_m{m}"] = t_tri / t_bf16
            figures[f"triton_over_dequant_m{m}"] = t_tri / t_deq
            if m <= tk.DECODE_ROWS:  # split-K's effect: the same call in one pass over K
                figures[f"split_k_m{m}"] = tk.split_k_for(m, n, k, x.device)
                figures[f"us_triton_one_pass_m{m}"] = _cuda_time(lambda: tk.quant_matmul(x, qt, split_k=1)) * 1e6
    ok &= all(v == v for v in figures.values() if isinstance(v, float))  # no nan
    return ok, figures


def triton_checks(cases, device: str, rec: Recorder, budget: Budget, timing: bool) -> None:
    """Kernel vs the torch path for every case and dtype (device "cpu" only under TRITON_INTERPRET=1)."""
    import torch

    gen = torch.Generator(device=device).manual_seed(0)
    for case in cases:
        fmt, kw, n, k = case
        tag = f"{fmt}{'+dq' if kw else ''}[{n}x{k}]"
        try:
            qt = triton_input(case, device)
        except Exception as e:
            rec.failed(f"2.triton.{tag}", reason=f"quantize on {device}: {type(e).__name__}: {e}"[:1500])
            continue
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            dname = str(dtype).removeprefix("torch.")
            name = f"2.triton.{tag}.{dname}"
            try:
                ok, figures = _case_figures(qt, dtype, n, k, gen, device, timing)
                if ok:
                    rec.passed(name, figures)
                else:
                    rec.failed(name, figures, reason=f"decode not exact or worst_rel > {TOLERANCE[dname]} or grad_rel > 0.05")
            except Exception as e:  # one case failing must not hide the others
                rec.failed(name, reason=f"{type(e).__name__}: {e}"[:1500])
        if budget.left() < 60:
            rec.skipped("2.triton.rest", "time budget spent")
            break
