"""A report as its sweep declares it: the `report:` block of sweeps/<name>.yaml or conf/experiment/<name>.yaml,
validated before anything is read; the jobs' configs carry it too (docs/sweeps.md, "The report": the format)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

from rlx.report.sweeps import papers
from rlx.run.records import Run
from rlx.sweeps.spec import CONF_DIR, SWEEPS_DIR, arm_axis

ARM_SOURCES = ("axis", "config")


@dataclass
class ReportSpec:
    """One report; kind `sweep`: jobs grouped by arm, `runs`: one run directory per seed, no arms."""

    name: str  # the sweep (or experiment) that declared it; its arm axis orders the arms
    title: str
    sections: list[tuple[str, dict]]
    kind: str = "sweep"
    arm_from: str = "axis"
    infer: str = "algo"
    order: list[str] | None = None
    labels: dict[str, str] = field(default_factory=dict)
    scaling: bool = False  # ScaleRL sweeps: curves of the scaling metric and the sigmoid plot

    @property
    def arm_key(self) -> str | None:
        return arm_axis(self.name)[0] if (SWEEPS_DIR / f"{self.name}.yaml").is_file() else None

    @property
    def arms(self) -> list[str]:
        if self.order is not None:
            return list(self.order)
        return list(arm_axis(self.name)[1]) if self.arm_key else []

    def arm_of(self, job: Run, infer) -> str:
        """The job's arm: the arm axis in its overrides (or Hydra's recorded choices), else its config."""
        if self.arm_from == "axis" and self.arm_key:
            choice = job.override(self.arm_key) or job.choices.get(self.arm_key)
            if choice:
                return str(choice)
        return infer(job)


def parse(block: dict, name: str, kinds: set[str], infers: set[str]) -> ReportSpec:
    """A ReportSpec from a `report:` block; a ValueError names the first thing wrong with it."""
    where = f"report of {name}"
    if not isinstance(block, dict):
        raise ValueError(f"{where}: expected a mapping, got {type(block).__name__}")
    known = {"title", "sections", "kind", "arm", "order", "labels", "scaling"}
    extra = sorted(set(block) - known)
    if extra:
        raise ValueError(f"{where}: unknown key(s) {extra}; a report block has {sorted(known)}")
    if not block.get("title") or not block.get("sections"):
        raise ValueError(f"{where}: needs a title and a non-empty sections list")
    kind = block.get("kind", "sweep")
    if kind not in ("sweep", "runs"):
        raise ValueError(f"{where}: kind {kind!r} is not 'sweep' or 'runs'")
    sections = []
    for item in block["sections"]:
        sec, opts = (item, {}) if isinstance(item, str) else (next(iter(item)), next(iter(item.values())) or {})
        if isinstance(item, dict) and len(item) != 1:
            raise ValueError(f"{where}: a section is one kind with its options, got {sorted(item)}")
        if sec not in kinds:
            raise ValueError(f"{where}: unknown section {sec!r}; known: {', '.join(sorted(kinds))}")
        sections.append((sec, dict(opts)))
    arm = block.get("arm") or {}
    arm_from, infer = arm.get("from", "axis"), arm.get("infer", "algo")
    if arm_from not in ARM_SOURCES or infer not in infers:
        raise ValueError(f"{where}: arm {arm}: 'from' is one of {ARM_SOURCES}, 'infer' one of {sorted(infers)}")
    return ReportSpec(name, str(block["title"]), sections, kind, arm_from, infer, block.get("order"),
                      labels_of(block.get("labels"), where), bool(block.get("scaling", False)))


def labels_of(value, where: str) -> dict[str, str]:
    """`paper:<name>[:<set>]` (papers.yaml's <name>.<set>, default `labels`) or a mapping as written."""
    if value is None:
        return {}
    if isinstance(value, dict):
        return {str(k): str(v) for k, v in value.items()}
    if isinstance(value, str) and value.startswith("paper:"):
        paper, _, which = value[len("paper:"):].partition(":")
        try:
            return dict(papers()[paper][which or "labels"])
        except KeyError:
            raise ValueError(f"{where}: labels {value!r}: papers.yaml has no {paper}.{which or 'labels'}") from None
    raise ValueError(f"{where}: labels must be a mapping or 'paper:<name>', got {value!r}")


def block_in(path: Path) -> dict:
    block = (yaml.safe_load(path.read_text()) or {}).get("report")
    if block is None:
        raise ValueError(f"{path} has no report: block")
    return block


def available() -> list[str]:
    """Every name with a report block in the checkout (what --layout accepts)."""
    files = sorted(SWEEPS_DIR.glob("*.yaml")) + sorted((CONF_DIR / "experiment").glob("*.yaml"))
    return [p.stem for p in files if "\nreport:" in "\n" + p.read_text()]


def find(jobs: list[Run], name: str | None = None, spec_file: Path | None = None) -> tuple[str, dict]:
    """(name, block): --spec FILE, else --layout NAME, else the jobs' own block, else their logger.group's file."""
    if spec_file is not None:
        return Path(spec_file).stem, block_in(Path(spec_file))
    groups = sorted({str(j.get("logger.group")) for j in jobs} - {"None"})
    if name is None:
        carried = [j.config.get("report") for j in jobs if j.config.get("report")]
        if carried and groups and len(groups) == 1 and all(c == carried[0] for c in carried):
            return groups[0], carried[0]
    names = available()  # reads every sweep and experiment file once
    if name is None:
        known = [g for g in groups if g in names]
        if len(known) != 1:
            raise ValueError(f"cannot tell the runs' report from logger.group ({groups or 'unset'}); pass --layout, "
                             f"one of {', '.join(names)}, or --spec FILE")
        name = known[0]
    if name not in names:
        raise ValueError(f"unknown layout {name!r}; choose one of {', '.join(names)}")
    path = SWEEPS_DIR / f"{name}.yaml"  # the sweep file, else the experiment's
    return name, block_in(path if path.is_file() else CONF_DIR / "experiment" / f"{name}.yaml")
