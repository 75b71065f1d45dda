"""Parts 3 and 4 of the GPU check: RL steps through `python -m rlx.train` (vllm, hf), and transformers generate tokens/s."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rlx.run import records as rlx_runs
from benchmarks.gpu_check.expect import vllm_choices
from benchmarks.gpu_check.common import Budget, QWEN2_7B, ROOT, Recorder, TINY, _cuda_available, _free_cuda, _sync, _tail, build_random_qwen2

# ----------------------------------------------------------------------------------------------
# part 3: RL steps through rlx.train


TAIL_KEYS = ("step", "val/acc", "rollout/logprob_diff/mean", "timing_s/step", "timing_s/gen", "train/reward/mean")


def rl_command(rollout: str, run_dir: Path, extra: list[str], device: str = "cuda") -> list[str]:
    return [
        sys.executable, "-m", "rlx.train", f"rollout={rollout}", "quant=nvfp4", f"trainer.device={device}",
        "trainer.dtype=bf16",  # vLLM's LoRA and FP4 GPU kernels take fp16/bf16; the tiny model pins fp32
        "train.steps=5", "train.eval_every=5", "train.ckpt_every=5", "logger.mode=disabled",
        "train.progress=false", f"hydra.run.dir={run_dir}", *extra,
    ]


def _last(rows: list[dict], key: str):
    values = [r[key] for r in rows if key in r]
    return values[-1] if values else None


def read_metrics(run_dir: Path) -> list[dict]:
    """The run's metrics rows (rlx.run.records), [] when it logged nothing or its log is unreadable."""
    try:
        return rlx_runs.read_metrics(run_dir) if (run_dir / "metrics.jsonl").exists() else []
    except ValueError:
        return []


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
            if r == "vllm":  # what the engine inside the run chose, from vLLM's log lines
                figures.update(vllm_choices(f"{out}\n{err}"))
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
