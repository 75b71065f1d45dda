"""A predictive sweep's decisions on disk: one JSON line per arm and round in SWEEP_DIR/predictive.jsonl,
rendered as SWEEP_DIR/predictive.md. The driver (rlx.sweeps.rounds) writes them; the report reads them."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from rlx.run.records import parse_metrics

DECISIONS_JSONL, DECISIONS_MD = "predictive.jsonl", "predictive.md"


def append_decisions(sweep_dir: str | Path, decisions: list) -> None:
    """Append the round's decisions (rule.Decision) to predictive.jsonl and rewrite predictive.md from all."""
    sweep_dir = Path(sweep_dir)
    with open(sweep_dir / DECISIONS_JSONL, "a") as fh:
        for d in decisions:
            fh.write(json.dumps(asdict(d)) + "\n")
    (sweep_dir / DECISIONS_MD).write_text(decisions_markdown(read_decisions(sweep_dir)))


def read_decisions(sweep_dir: str | Path) -> list[dict]:
    """Every decision in SWEEP_DIR/predictive.jsonl, in order ([] without one); a last line cut by a kill dropped."""
    path = Path(sweep_dir) / DECISIONS_JSONL
    if not path.is_file():
        return []
    return [row for _, row in parse_metrics(path, key="round")[0]]


def arm_outcomes(records: list[dict]) -> dict[str, dict]:
    """{arm: its last decision}: the budget it received and, for a stopped arm, the round and reason."""
    return {r["arm"]: r for r in records}


def decisions_markdown(records: list[dict]) -> str:
    """predictive.md: one row per decision."""
    lines = ["# Predictive sweep: decisions per round", "",
             "A with its bootstrap interval, pooled over seeds; rule in docs/predictive.md.", "",
             "| round | arm | steps | A [interval] | fit | decision | reason |", "|---|---|---|---|---|---|---|"]
    for r in records:
        a = "-" if r.get("A") is None else f"{r['A']:.3f}"
        if r.get("A_lo") is not None:
            a += f" [{r['A_lo']:.3f}, {r['A_hi']:.3f}]"
        lines.append(f"| {r['round']} | {r['arm']} | {r['budget']} | {a} | {r['fit']} | {r['decision']} | "
                     f"{str(r['reason']).replace('|', '/')} |")
    return "\n".join(lines) + "\n"
