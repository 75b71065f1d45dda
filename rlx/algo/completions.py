"""Completion tables (RunLogger.log_completions), every `logger.completions_every` steps: the first
`logger.completions_rows` rows of the step's batch as generated (no random draw), with each reward function's
value and the advantage within that batch (before refills or filters)."""

from __future__ import annotations

import math

from rlx.algo.advantages import compute_advantages

MAX_CELL_CHARS = 4000  # longer prompts / completions are cut (the cut is marked) so one row stays small


def clip(text: str, limit: int = MAX_CELL_CHARS) -> str:
    return text if len(text) <= limit else text[:limit] + f"...[{len(text) - limit} more chars]"


def completion_rows(cfg, step: int, examples, batch, per_fn: dict, rewards, passed) -> list[dict] | None:
    """The step's table rows, or None when no table is due (logger.completions_every)."""
    every = cfg.logger.completions_every
    if every <= 0 or step % every != 0:
        return None
    adv = compute_advantages(rewards, batch.group, cfg.algo)  # [N]
    n = min(cfg.logger.completions_rows, len(batch.texts))
    rows = []
    for i in range(n):
        g = int(batch.group[i])
        row = {"step": step, "group": g, "prompt": clip(examples[g].prompt), "completion": clip(batch.texts[i]),
               "reward": float(rewards[i]), "advantage": float(adv[i]), "passed": bool(passed[i])}
        for name, values in per_fn.items():  # None (NaN: the function does not apply) stays None
            row[f"reward/{name}"] = None if math.isnan(values[i]) else float(values[i])
        rows.append(row)
    return rows
