"""What a report takes from the repository: each sweep's arms (its arm axis, rlx.sweeps.spec.arm_axis) and the
papers' numbers. Published numbers and row labels come from `papers.yaml` next to this file.
"""

from __future__ import annotations

import functools
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import yaml

from rlx.run.records import Run
from rlx.sweeps.spec import arm_axis


@functools.cache
def papers() -> dict:
    """rlx/report/papers.yaml: published numbers and arm labels, by paper."""
    return yaml.safe_load((Path(__file__).with_name("papers.yaml")).read_text())


@dataclass
class Layout:
    """How one sweep file's report looks: its arms (from the sweep file), the paper's tables, labels."""

    sweep: str  # sweeps/<sweep>.yaml, also the jobs' logger.group
    title: str
    infer: Callable[[Run], str]  # arm from the config when the job has no arm override
    tables: Callable[[dict[str, list[Run]], list[Run]], list[str]]
    labels: dict[str, str] = field(default_factory=dict)
    scaling: bool = False

    @property
    def arm_key(self) -> str | None:
        return arm_axis(self.sweep)[0]

    @property
    def order(self) -> list[str]:
        return list(arm_axis(self.sweep)[1])

    def shown(self, arms: dict[str, list[Run]]) -> dict[str, list[Run]]:
        """The runs the curves and the completions show (every run; a layout whose tables count a subset
        shows that subset)."""
        return arms

    def arm_of(self, job: Run) -> str:
        """The job's arm: the arm axis in its overrides (or Hydra's recorded choices), else its config."""
        if self.arm_key:
            choice = job.override(self.arm_key) or job.choices.get(self.arm_key)
            if choice:
                return str(choice)
        return self.infer(job)


def by_arm(jobs: list[Run], order: list[str]) -> dict[str, list[Run]]:
    """Jobs grouped by arm: known arms in `order` first, then any others in first-seen order."""
    groups: dict[str, list[Run]] = {a: [] for a in order}
    for j in jobs:
        groups.setdefault(j.arm, []).append(j)
    return {a: js for a, js in groups.items() if js}


def sweep_command(root: Path) -> str | None:
    """The command that launched the sweep, from Hydra's SWEEP_DIR/multirun.yaml (None if absent)."""
    found = sorted(root.glob("multirun.yaml")) or sorted(root.glob("*/multirun.yaml"))
    if not found:
        return None
    hydra_cfg = (yaml.safe_load(found[0].read_text()) or {}).get("hydra") or {}
    name = (hydra_cfg.get("job") or {}).get("config_name") or "config"
    task = (hydra_cfg.get("overrides") or {}).get("task") or []
    head = ["python", "-m", "rlx.train", "-m"] + ([] if name == "config" else ["--config-dir", "sweeps",
                                                                               "--config-name", name])
    return " ".join(head + [shlex.quote(str(o)) for o in task])
