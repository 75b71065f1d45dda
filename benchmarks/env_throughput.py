"""Generation through a verifiers environment against rlx's own engine call, in one alternating run.

    python -m benchmarks.env_throughput [--prompts 16] [--n 4] [--max-tokens 64] [--rounds 3] [--threads 1]

Three arms over the same rendered prompts of examples/envs/wordproblems_vf.py, on one hf engine serving a
random 1M-parameter Qwen2 that never writes eos (benchmarks.rollout.build_policy: every row is exactly
--max-tokens long, so the arms generate the same tokens and only their overheads differ):
- `engine`: `engine.generate(prompts, n)`, what rlx's own single-turn task does;
- `verifiers`: the environment's rollouts through rlx's client (VerifiersEngine: concurrent episodes, one
  engine call per wave of model calls);
- `per_episode`: the same environment with one engine call per episode (each episode generated alone), what a
  client without waves would cost.
Prints tokens per wall second and per process-CPU second for each arm and the ratios to `engine`, medians over
the rounds. The tiny model makes generation cheap, so the environment's per-episode overhead weighs more here
than on a real model: an upper bound on the overhead.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = str(ROOT / "examples" / "envs" / "wordproblems_vf.py")
TEMPLATE = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}</{{ m['role'] }}>\n{% endfor %}"
            "{% if add_generation_prompt %}<assistant>{% endif %}")
ARMS = ("engine", "verifiers", "per_episode")


def measure(fn) -> dict:
    """Wall and process-CPU seconds of fn() and the completion tokens of the batches it returns."""
    cpu, wall = time.process_time(), time.perf_counter()
    batches = fn()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    tokens = sum(int(b.completion_mask.sum()) for b in batches)
    return {"tokens": tokens, "tok_s": tokens / wall, "tok_cpu_s": tokens / max(cpu, 1e-9)}


def ratios(rows: list[dict]) -> list[str]:
    """Median tokens/s and tokens/CPU-s per arm, and each arm over `engine`."""
    med = {arm: {k: statistics.median(r[k] for r in rows if r["arm"] == arm) for k in ("tok_s", "tok_cpu_s")}
           for arm in ARMS if any(r["arm"] == arm for r in rows)}
    base = med["engine"]
    return [f"{arm}: {m['tok_s']:.0f} tok/s, {m['tok_cpu_s']:.0f} tok/CPU-s; / engine = {m['tok_s'] / base['tok_s']:.2f}"
            f" (wall), {m['tok_cpu_s'] / base['tok_cpu_s']:.2f} (CPU)" for arm, m in med.items()]


def main(argv: list[str] | None = None) -> list[str]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    from benchmarks.rollout import build_policy, make_engine
    from rlx.envs.driver import Budget
    from rlx.envs.ecosystem.vf_engine import VerifiersEngine
    from rlx.envs.ecosystem.vf_load import load, render, rows
    from rlx.rollout import SamplingParams

    with tempfile.TemporaryDirectory(prefix="rlx-env-throughput-") as work:
        policy, tok, _ = build_policy("1m", Path(work))
        tok.chat_template = TEMPLATE
        engine = make_engine("hf", policy, tok, Path(work), a.threads, 0.25, 512)
        env = load(EXAMPLE, {"n_train": a.prompts, "n_eval": 2})
        prompts = [render(tok, r["prompt"]) for r in rows(env, "train")][: a.prompts]
        vf = VerifiersEngine(engine, env, tok, Budget(max_turns=1, turn_tokens=0), "wordproblems_vf")
        sp = SamplingParams(max_tokens=a.max_tokens, temperature=1.0)

        def gen(e, ps, n):
            return [e.generate(ps, n, sp, torch.Generator().manual_seed(0))]

        run = {"engine": lambda: gen(engine, prompts, a.n), "verifiers": lambda: gen(vf, prompts, a.n),
               "per_episode": lambda: [b for p in prompts for _ in range(a.n) for b in gen(vf, [p], 1)]}
        out = []
        for r in range(a.rounds):
            for arm in ARMS:
                out.append({"round": r, "arm": arm, **measure(run[arm])})
                print(out[-1], flush=True)
        engine.close()
    lines = ratios(out)
    print("\n".join(lines))
    return lines


if __name__ == "__main__":
    main()
