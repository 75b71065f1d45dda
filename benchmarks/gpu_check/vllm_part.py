"""Part 1 of the GPU check: vLLM generation tokens/s, bf16 vs NVFP4, each engine in its own child process."""

from __future__ import annotations

import importlib.util
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.gpu_check.expect import EXPECTED_NVFP4_KERNEL, arch_of, kernel_as_expected, ratio_expectation, vllm_choices
from benchmarks.gpu_check.common import Budget, ENGINE_TAG, QWEN2_7B, ROOT, Recorder, TINY, _cuda_available, _dir_bytes, _free_cuda, _sync, _tail, build_random_qwen2

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
    cmd = [sys.executable, "-m", "benchmarks.gpu_check", "--engine-spec", json.dumps(spec)]
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=budget.timeout(timeout_s))
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = (e.stderr or b"").decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        return None, f"timed out after {e.timeout:.0f} s; stderr tail: {_tail(err or out)}"
    for line in proc.stdout.splitlines():
        if line.startswith(ENGINE_TAG):
            return {**json.loads(line[len(ENGINE_TAG):]), **vllm_choices(f"{proc.stdout}\n{proc.stderr}")}, ""
    refused = vllm_choices(f"{proc.stdout}\n{proc.stderr}")["nvfp4_refused"]
    return None, (f"NVFP4 kernel refused: {refused}; " if refused else "") + \
        f"exit {proc.returncode}; stderr tail: {_tail(proc.stderr or proc.stdout)}"


def _arch(device: str) -> str:
    import torch

    return arch_of(torch.cuda.get_device_capability() if device == "cuda" else None)


def _checkpoints(shape: dict, device: str, tmp: Path, rec: Recorder) -> tuple[Path, Path]:
    """A random model saved as bf16 (HF save_pretrained) and as NVFP4 (rlx's compressed-tensors exporter)."""
    from rlx.quant import QuantConfig, export_compressed_tensors, quantize_model

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
    return bf16_dir, nvfp4_dir


def _engine_part(fmt: str, path: Path, device: str, shape: dict, batches: list[int], args, rec: Recorder,
                 budget: Budget, tps: dict) -> None:
    """One engine (bf16 or nvfp4) in a child process: tokens/s per batch into `rec`, and into `tps`."""
    if device == "cpu" and fmt == "nvfp4":
        rec.skipped("1.vllm.nvfp4", "vllm-cpu cannot serve NVFP4 weight-only (NVFP4A16 needs Marlin / "
                                    "CUTLASS / FlashInfer kernels, CUDA only); checkpoint was exported above")
        return
    spec = dict(model=str(path), device=device, dtype="bfloat16", max_model_len=args.max_model_len,
                batches=batches, prompt_len=args.prompt_len, new_tokens=args.new_tokens,
                repeats=args.repeats, vocab_size=shape["vocab_size"],
                mode=args.vllm_mode if device == "cuda" else "eager",
                gpu_memory_utilization=args.gpu_memory_utilization, kv_cache_memory_bytes=64 << 20)
    if budget.left() < 60:
        rec.skipped(f"1.vllm.{fmt}", "time budget spent")
        return
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
        return
    common = {k: result[k] for k in ("import_s", "init_s", "warmup_s", "mode", "model_runner", "model_runner_why")}
    if fmt == "nvfp4":
        common["nvfp4_kernel"] = result["nvfp4_kernel"]
        common["kernel_as_expected"] = kernel_as_expected(_arch(device), result["nvfp4_kernel"])
        common["expected_kernels"] = list(EXPECTED_NVFP4_KERNEL.get(_arch(device), EXPECTED_NVFP4_KERNEL["other"]))
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


def part_vllm(args, rec: Recorder, budget: Budget) -> None:
    cuda = _cuda_available()
    if not args.smoke and not cuda:
        rec.skipped("1.vllm", "no CUDA device (--smoke runs the CPU code path with a tiny model)")
        return
    if importlib.util.find_spec("vllm") is None:
        rec.skipped("1.vllm", "vllm is not installed in this Python (pip install vllm; see docs/gpu.md)")
        return
    device = "cuda" if (cuda and not args.smoke) else "cpu"
    shape = TINY if args.smoke else QWEN2_7B
    batches = [int(b) for b in args.batches.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="rlx_gpu_bench_", dir=args.tmp_dir))
    try:
        bf16_dir, nvfp4_dir = _checkpoints(shape, device, tmp, rec)
        # -- engines, one child process each
        tps: dict[tuple[str, int], float] = {}
        for fmt, path in (("bf16", bf16_dir), ("nvfp4", nvfp4_dir)):
            _engine_part(fmt, path, device, shape, batches, args, rec, budget, tps)
        for b in batches:
            if ("bf16", b) in tps and ("nvfp4", b) in tps:  # measured beside expected: recorded, not judged
                rec.passed(f"1.vllm.ratio.b{b}", {"nvfp4_over_bf16": tps[("nvfp4", b)] / tps[("bf16", b)],
                                                  "bf16_tok_s": tps[("bf16", b)], "nvfp4_tok_s": tps[("nvfp4", b)],
                                                  **ratio_expectation(_arch(device), b)})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
