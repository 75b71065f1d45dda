"""What the fits of a sweep read from its run directories: the sweep's ScalingConfig (its jobs' `scaling.*`)
and, per arm, the evaluations of every seed pooled."""

from __future__ import annotations

from pathlib import Path

from rlx.run.records import Run, read_sweep
from rlx.scaling.config import ScalingConfig, as_config
from rlx.scaling.grouping import evaluations, pool


def scaling_config(jobs: list[Run]) -> ScalingConfig:
    """The sweep's ScalingConfig (the first job's `scaling.*`, with fit defaulting to sigmoid)."""
    given = dict(jobs[0].config.get("scaling") or {}) if jobs else {}
    if given.get("fit", "none") == "none":
        given["fit"] = "sigmoid"
    return as_config(given)


def arm_points(sweep_dir: str | Path, arm_key: str, arms: list[str]):
    """({arm: (compute [N], reward [N], R0)} with seeds pooled, the sweep's ScalingConfig) from the runs so far."""
    runs = read_sweep(sweep_dir)
    cfg = scaling_config(runs)
    points = {}
    for arm in arms:
        mine = [r for r in runs if (r.override(arm_key) or r.choices.get(arm_key)) == arm]
        series = []
        for run in mine:
            try:
                series.append(evaluations(run, cfg.metric, cfg.compute))
            except ValueError:
                continue  # no evaluation yet: the arm's fit is undetermined
        points[arm] = pool(series)
    return points, cfg
