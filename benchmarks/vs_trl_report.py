"""Aggregation and tables of `benchmarks.vs_trl`: per-run means, per-side means over repeats, ratios
rlx / TRL side with their spread over the alternating pairs, and markdown tables (wall, CPU, RSS)."""

from __future__ import annotations

import statistics

from benchmarks.vs_trl_sides import PHASES

RSS_KEYS = ("peak_rss_mb", "update_rss_mb", "gen_rss_mb")


def summarize_run(run: dict) -> dict:
    """Per-run means over the timed steps (step 1, the warm-up, dropped when there is more than one step):
    wall seconds `step`, `gen`, `train`, process CPU seconds `step_cpu`, ..., and the run's peak RSS
    (MiB; whole process, and within each phase over all steps, the warm-up included)."""
    steps = [s for s in run["steps"] if s["step"] >= 2] or run["steps"]
    out = {k: statistics.fmean(s[f"{k}_s"] for s in steps) for k in PHASES}
    if all(f"{k}_cpu" in s for s in steps for k in PHASES):
        out |= {f"{k}_cpu": statistics.fmean(s[f"{k}_cpu"] for s in steps) for k in PHASES}
    out |= {k: run[k] for k in RSS_KEYS if k in run}
    return out | {"mean_len": statistics.fmean(s["mean_len"] for s in steps), "n_steps": len(steps)}


def aggregate(runs: dict[str, list[dict]], pairs: dict[str, list[tuple[int, int]]]) -> dict:
    """Per side: mean and [min, max] over its runs. Per TRL side `t`, over `pairs[t]` (index of an rlx
    run, index of the t run next to it): `rlx@<t>_<key>` the mean of those rlx runs, `ratio_<t>_<key>`
    = that / t's mean, and its [min, max] over the pairs."""
    per = {side: [summarize_run(r) for r in rs] for side, rs in runs.items() if rs}  # sides with a result
    if not per:
        return {}
    first = next(iter(per.values()))[0]
    keys = [k for k in first if k != "n_steps" and all(k in p for ps in per.values() for p in ps)]
    row: dict = {}
    for side, ps in per.items():
        for k in keys:
            vals = [p[k] for p in ps]
            row[f"{side}_{k}"] = statistics.fmean(vals)
            row[f"{side}_{k}_range"] = [min(vals), max(vals)]
    for t, idx in pairs.items():
        if not idx:  # no (rlx, t) pair where both runs gave a result
            continue
        for k in keys:
            row[f"rlx@{t}_{k}"] = statistics.fmean(per["rlx"][i][k] for i, _ in idx)
            if k == "mean_len":
                continue
            ratios = [per["rlx"][i][k] / per[t][j][k] for i, j in idx]
            row[f"ratio_{t}_{k}"] = row[f"rlx@{t}_{k}"] / row[f"{t}_{k}"]
            row[f"ratio_{t}_{k}_range"] = [min(ratios), max(ratios)]
    return row


def _ratio_cell(r: dict, t: str, k: str, bold: bool = False) -> str:
    lo, hi = r[f"ratio_{t}_{k}_range"]
    v = f"{r[f'ratio_{t}_{k}']:.2f}"
    return f"{'**' + v + '**' if bold else v} [{lo:.2f}-{hi:.2f}]"


def _rows(rows: list[dict], first_key: str):
    """(row, TRL side) for each row and each of its TRL sides that has `first_key`'s ratio."""
    for r in rows:
        for t in r["trl_sides"]:
            if f"ratio_{t}_{first_key}" in r:
                yield r, t


def format_table(rows: list[dict], suffix: str = "") -> str:
    """Markdown table of wall seconds (`suffix` ""), or of process CPU seconds (`suffix` "_cpu"), one
    line per setting and TRL side."""
    unit = "s" if not suffix else "CPU s"
    head = "| model | params | T | vs | len rlx/TRL |" + "".join(
        f" rlx {k} {unit} | TRL {k} {unit} | {k} rlx/TRL |" for k in PHASES)
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r, t in _rows(rows, "step" + suffix):
        cells = [r["setting"], f"{r['params'] / 1e6:.2f}M", str(r["max_new"]), t,
                 f"{r[f'rlx@{t}_mean_len']:.1f}/{r[f'{t}_mean_len']:.1f}"]
        for k in PHASES:
            k = k + suffix
            cells += [f"{r[f'rlx@{t}_{k}']:.2f}", f"{r[f'{t}_{k}']:.2f}", _ratio_cell(r, t, k, k.startswith("step"))]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) if len(lines) > 2 else ""


def format_rss_table(rows: list[dict]) -> str:
    """Markdown table of peak RSS (MiB): the whole process, and within the update and generation phases."""
    names = {"peak_rss_mb": "peak", "update_rss_mb": "update peak", "gen_rss_mb": "gen peak"}
    keys = [k for k in RSS_KEYS if any(f"ratio_{t}_{k}" in r for r, t in _rows(rows, "peak_rss_mb"))]
    head = "| model | T | vs |" + "".join(f" rlx {names[k]} MiB | TRL {names[k]} MiB | {names[k]} rlx/TRL |"
                                          for k in keys)
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r, t in _rows(rows, "peak_rss_mb"):
        cells = [r["setting"], str(r["max_new"]), t]
        for k in keys:
            cells += [f"{r[f'rlx@{t}_{k}']:.0f}", f"{r[f'{t}_{k}']:.0f}", _ratio_cell(r, t, k, k == "peak_rss_mb")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) if len(lines) > 2 else ""
