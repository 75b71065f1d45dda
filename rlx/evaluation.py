"""Held-out evaluation: greedy accuracy and mean@k on every eval set, through the rollout engine.

One set (task.eval empty): `val/acc`, `val/mean_at_k`, `val/k`, as always. Named sets (task.eval):
`val/<name>/acc` and `val/<name>/mean_at_k` for each, and their unweighted mean as `val/acc` and
`val/mean_at_k` (verl logs `val-core/<source>/...` per source; the mean keeps every reader of
`val/acc` -- reports, sweeps, the scaling fit -- working). All sets are generated in one engine call.
"""

from __future__ import annotations

import torch


def _split(values: list, sizes: list[int], per: int = 1) -> list[list]:
    """Consecutive chunks of `values`, `size * per` long each."""
    out, i = [], 0
    for n in sizes:
        out.append(values[i : i + n * per])
        i += n * per
    return out


def evaluate(p, step: int) -> dict:
    """Greedy accuracy and mean@k on the eval sets, with the current policy, never under AQN noise.
    `p` is the loop's Parts (cfg, task, schedule, policy, sampling)."""
    cfg, task = p.cfg, p.task
    g = torch.Generator().manual_seed(cfg.seed * 1_000_003 + step)  # own stream: eval never shifts training RNG
    names = list(task.eval_sets)
    sets = [task.eval_sets[n] for n in names]
    sizes = [len(ex) for ex in sets]
    prompts = [e.prompt for ex in sets for e in ex]
    k = cfg.rollout.eval_k
    sp = p.sampling.but(max_tokens=cfg.rollout.eval_max_new_tokens or cfg.rollout.max_new_tokens)
    with p.schedule.serving(p.policy, step) as engine:  # the current policy, whatever the schedule samples from
        greedy = engine.generate(prompts, 1, sp.but(temperature=0.0), g).texts  # [sum(sizes)]
        sampled = engine.generate(prompts, k, sp.but(temperature=cfg.rollout.eval_temperature), g).texts if k > 0 else None
    per_set = {}
    for name, ex, texts in zip(names, sets, _split(greedy, sizes)):
        per_set[name] = {"acc": _pass_rate(task, ex, texts)}
    if sampled is not None:  # [sum(sizes) * k], k consecutive samples per prompt
        for name, ex, texts in zip(names, sets, _split(sampled, sizes, k)):
            per_set[name]["mean_at_k"] = _pass_rate(task, [e for e in ex for _ in range(k)], texts)
    out = {}
    if task.named_eval:
        for name, m in per_set.items():
            out.update({f"val/{name}/{key}": v for key, v in m.items()})
    out["val/acc"] = sum(m["acc"] for m in per_set.values()) / len(per_set)
    if sampled is not None:
        out["val/mean_at_k"] = sum(m["mean_at_k"] for m in per_set.values()) / len(per_set)
        out["val/k"] = k
    return out


def _pass_rate(task, examples, texts) -> float:
    return sum(task.passed(task.score(examples, texts))) / len(examples)
