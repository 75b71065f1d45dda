"""What a report takes from the repository: the papers' numbers and labels (`papers.yaml` here), arms, the command."""

from __future__ import annotations

import functools
import shlex
from pathlib import Path

import yaml

from rlx.run.records import Run


@functools.cache
def papers() -> dict:
    """rlx/report/papers.yaml: published numbers and arm labels, by paper."""
    return yaml.safe_load((Path(__file__).with_name("papers.yaml")).read_text())


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
