"""Run directories as the fitter sees them: metrics.jsonl, .hydra/config.yaml and summary.json, nothing else."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

COMPUTE_UNITS = ("gpu_hours", "flops", "tokens", "steps")


def compute_key(unit: str) -> str:
    if unit not in COMPUTE_UNITS:
        raise ValueError(f"unknown compute unit {unit!r}; choose one of {', '.join(COMPUTE_UNITS)}")
    return f"perf/compute/{unit}"


@dataclass
class Series:
    """One run's evaluations of a metric: step [N], compute [N], reward [N], sorted by step."""

    step: np.ndarray
    compute: np.ndarray
    reward: np.ndarray

    def __len__(self) -> int:
        return int(self.step.size)

    @property
    def r0(self) -> float | None:
        """The reward of the step-0 evaluation (before any RL), None if the run has none."""
        return float(self.reward[0]) if self.step.size and self.step[0] == 0 else None


@dataclass
class RunLog:
    """A run directory, read once."""

    path: Path
    records: list[dict]  # metrics.jsonl lines, in file order
    config: dict = field(default_factory=dict)  # flattened resolved config: {"algo.name": "grpo", ...}
    summary: dict = field(default_factory=dict)
    skipped_lines: int = 0  # unparsable lines (e.g. the half-written last line of a killed run)

    @property
    def failed(self) -> bool:
        return str(self.summary.get("status", "")).lower() == "failed"

    @property
    def last_step(self) -> int:
        return max((int(r["step"]) for r in self.records), default=0)

    def series(self, metric: str, unit: str) -> Series:
        """Evaluations of `metric` with their cumulative compute; duplicate steps (a resumed run) keep the last."""
        key = compute_key(unit)
        by_step: dict[int, dict] = {}
        for rec in self.records:
            if metric in rec:
                by_step[int(rec["step"])] = rec  # later lines overwrite earlier ones
        if not by_step:
            raise ValueError(f"{self.path}: no evaluation logs {metric!r} in metrics.jsonl")
        steps = sorted(by_step)
        compute = []
        for s in steps:
            rec = by_step[s]
            if key in rec:
                compute.append(rec[key])
            elif unit == "steps":
                compute.append(s)
            else:
                logged = sorted(k for k in rec if k.startswith("perf/compute/")) or ["none"]
                raise ValueError(
                    f"{self.path}: the evaluation at step {s} has no {key!r} (logged: {', '.join(logged)})"
                )
        return Series(
            step=np.array(steps, dtype=int),
            compute=np.array(compute, dtype=float),
            reward=np.array([_number(by_step[s][metric]) for s in steps], dtype=float),
        )


def _number(v) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def read_run(path: str | Path) -> RunLog:
    """Read RUN/metrics.jsonl (required), RUN/.hydra/config.yaml and RUN/summary.json (optional)."""
    path = Path(path)
    metrics = path / "metrics.jsonl"
    if not metrics.is_file():
        raise ValueError(f"{path}: no metrics.jsonl (not a run directory)")
    records, skipped = [], 0
    for line in metrics.read_text().splitlines():
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            skipped += 1
            continue
        if isinstance(rec, dict) and "step" in rec:
            records.append(rec)
        else:
            skipped += 1
    config, summary = {}, {}
    cfg_file = path / ".hydra" / "config.yaml"
    if cfg_file.is_file():
        loaded = yaml.safe_load(cfg_file.read_text()) or {}
        if isinstance(loaded, dict):
            config = flatten(loaded)
    sum_file = path / "summary.json"
    if sum_file.is_file():
        try:
            summary = json.loads(sum_file.read_text())
        except json.JSONDecodeError:
            summary = {"status": "unreadable summary.json"}
    return RunLog(path=path, records=records, config=config, summary=summary, skipped_lines=skipped)


def flatten(tree: dict, prefix: str = "") -> dict:
    """{"algo": {"name": "grpo"}} -> {"algo.name": "grpo"}; lists become tuples (hashable)."""
    out = {}
    for k, v in tree.items():
        name = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, name + "."))
        elif isinstance(v, list):
            out[name] = tuple(json.dumps(x, sort_keys=True) if isinstance(x, (dict, list)) else x for x in v)
        else:
            out[name] = v
    return out


def find_runs(root: str | Path) -> list[Path]:
    """Every directory under root (root included, any depth) holding a metrics.jsonl, sorted by path."""
    root = Path(root)
    if not root.exists():
        raise ValueError(f"{root}: no such directory")
    hidden = lambda p: any(part.startswith(".") for part in p.relative_to(root).parts[:-1])  # noqa: E731
    found = sorted({p.parent for p in root.rglob("metrics.jsonl") if not hidden(p)})
    if not found:
        raise ValueError(f"{root}: no run directory (no metrics.jsonl at any depth)")
    return found
