"""A sweep's report: read its jobs once, find the report its sweep declares (rlx.report.spec), render the declared
sections in order, then the plots and the jobs table."""

from __future__ import annotations

from pathlib import Path

from rlx.report import spec as specs
from rlx.report.plots import plot_curves, plot_scaling
from rlx.report.runs import RUN_SECTIONS, runs_report
from rlx.report.sections import INFER, SECTIONS, Context, check_options
from rlx.report.sweeps import by_arm, sweep_command
from rlx.report.tables import completions_section, not_ok_counts, predictive_section, runs_table
from rlx.run.records import Run, read_sweep
from rlx.sweeps.points import scaling_config


def load_spec(jobs: list[Run], layout: str | None = None, spec_file: Path | None = None) -> specs.ReportSpec:
    name, block = specs.find(jobs, layout, spec_file)
    spec = specs.parse(block, name, set(RUN_SECTIONS if block.get("kind") == "runs" else SECTIONS), set(INFER))
    check_options(spec, RUN_SECTIONS if spec.kind == "runs" else SECTIONS)
    return spec


def detect_layout(jobs: list[Run]) -> str:
    return specs.find(jobs)[0]


def build_report(root: str | Path, layout: str | None = None, plots: bool = True) -> tuple[str, list[Path]]:
    """(markdown, PNG paths) for the sweep under root; nothing is written except the PNGs."""
    md, pngs, _ = build(root, layout, plots)
    return md, pngs


def build(root: str | Path, layout: str | None = None, plots: bool = True, base: str | Path | None = None,
          spec_file: Path | None = None) -> tuple[str, list[Path], dict | None]:
    """(markdown, PNG paths, JSON document or None) for the runs under root; writes only the PNGs. base: --base."""
    root = Path(root)
    jobs = read_sweep(root, marker=".hydra/config.yaml")
    spec = load_spec(jobs, layout, spec_file)
    if spec.kind == "runs":
        return runs_report(root, jobs, spec, plots=plots, base=base)
    if base is not None:
        raise ValueError(f"--base is for a report of kind runs (one run per seed), not {spec.name}")
    for j in jobs:
        j.arm = spec.arm_of(j, INFER[spec.infer])
    arms = by_arm(jobs, spec.arms)
    n_failed, n_unfinished = not_ok_counts(jobs)
    walls = [float(j.summary["wall_s"]) for j in jobs if j.summary.get("wall_s") is not None]
    lines = [f"# {spec.title}: `{root}`", "",
             f"{len(jobs)} jobs, {len(arms)} arms, {n_failed} failed, {n_unfinished} not finished"
             + (" (without summary.json: still running, killed, or crashed while being built outside a sweep)"
                if n_unfinished else "")
             + (f"; job wall time {sum(walls) / 60:.1f} min in all (longest job {max(walls):.0f} s)" if walls else "")
             + ".", ""]
    command = sweep_command(root)
    if command:
        lines += ["Command (from multirun.yaml; the sweep directory was "
                  f"`{root}`):", "", "```bash", command, "```", ""]
    ctx = Context(spec, arms, jobs, root)
    for name, opts in spec.sections:
        if not ctx.done:
            lines += SECTIONS[name](ctx, **opts)
    lines += predictive_section(root)
    pngs: list[Path | None] = []
    if plots:
        eval_key = scaling_config(jobs).metric if spec.scaling else "val/acc"
        pngs.append(plot_curves(ctx.arms, root / "report_curves.png", spec.labels, eval_key))
        if spec.scaling:
            pngs.append(plot_scaling(arms, root / "report_scaling.png", spec.labels, scaling_config(jobs)))
    pngs = [p for p in pngs if p is not None]
    if pngs:
        lines += ["", "## Plots", ""] + [f"![{p.stem}]({p.name})" for p in pngs]
    lines += completions_section([j for js in ctx.arms.values() for j in js], root)
    lines += ["", "## Jobs", ""] + runs_table(jobs)
    return "\n".join(lines) + "\n", pngs, None
