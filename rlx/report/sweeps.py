"""What a report takes from the repository: each sweep's arms (sweeps/*.yaml, sweeps/*_arm/) and the papers' numbers.

A sweep's arm axis is the first of its `hydra.sweeper.params` (seed aside) that names a config group
(a directory `sweeps/<key>/` or `conf/<key>/`): `qerl_arm`, `next_arm`, `loo_arm`, `offpolicy_arm`,
`algo`, `quant`. Its comma-separated values are the arms, in the paper's order. Published numbers
and row labels come from `papers.yaml` next to this file.
"""

from __future__ import annotations

import functools
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import yaml

from rlx.runs import Run, flatten

ROOT = Path(__file__).resolve().parents[2]
SWEEPS, CONF = ROOT / "sweeps", ROOT / "conf"


@functools.cache
def papers() -> dict:
    """rlx/report/papers.yaml: published numbers and arm labels, by paper."""
    return yaml.safe_load((Path(__file__).with_name("papers.yaml")).read_text())


@functools.cache
def arm_axis(sweep: str) -> tuple[str | None, tuple[str, ...]]:
    """(arm key, arms in order) of sweeps/<sweep>.yaml; (None, ()) when it has no config-group axis."""
    path = SWEEPS / f"{sweep}.yaml"
    params = ((yaml.safe_load(path.read_text()) or {}).get("hydra") or {}).get("sweeper", {}).get("params") or {}
    for key, values in params.items():
        if key != "seed" and ((SWEEPS / key).is_dir() or (CONF / key).is_dir()):
            return key, tuple(v.strip() for v in str(values).split(","))
    return None, ()


@functools.cache
def arm_settings(group: str) -> dict[str, dict]:
    """{arm: its settings, flattened} for every sweeps/<group>/<arm>.yaml (Hydra's `defaults` list left out)."""
    out = {}
    for path in sorted((SWEEPS / group).glob("*.yaml")):
        tree = yaml.safe_load(path.read_text()) or {}
        out[path.stem] = flatten({k: v for k, v in tree.items() if k != "defaults"})
    return out


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
