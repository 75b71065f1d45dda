"""A sweep's report: read its jobs once, pick the paper's layout, render its tables, plots and the jobs table."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Callable

from rlx.report.gsm8k import gsm8k_report
from rlx.report.next import infer_next, next_tables, smollm2_next_tables
from rlx.report.plots import plot_curves, plot_scaling
from rlx.report.pretrained import infer_engine, infer_setting, pretrained_tables
from rlx.report.qerl import infer_qerl, infer_speed, qerl_tables, speed_tables
from rlx.report.qerl_tuned import LAYOUT as SMOLLM2_QERL_TUNED
from rlx.report.scalerl import (
    infer_algo, infer_loo, infer_offpolicy, loo_tables, losses_tables, offpolicy_tables,
)
from rlx.report.sweeps import Layout, by_arm, papers, sweep_command
from rlx.report.tables import completions_section, not_ok_counts, predictive_section, runs_table
from rlx.run.records import Run, read_sweep
from rlx.sweeps.points import scaling_config

def smollm2_qerl_tables(arms: dict[str, list[Run]], jobs: list[Run]) -> list[str]:
    """QeRL's Table 1, entropy and pairs on SmolLM2, then each arm's held-out accuracy seed by seed."""
    return qerl_tables(arms, jobs, sweep="smollm2_qerl", row="rlx SmolLM2-135M (this sweep)",
                       sixteen_bit="the unquantized base (fp32)") + [""] + pretrained_tables(
        arms, jobs, heading="arm: ")


LAYOUTS: dict[str, Layout] = {
    "qerl_table1": Layout("qerl_table1", "QeRL Table 1 (tiny scale)", infer_qerl, qerl_tables, papers()["qerl"]["labels"]),
    "qerl_speed": Layout("qerl_speed", "QeRL speed (tiny scale)", infer_speed, speed_tables),
    "next_table": Layout("next_table", "NExt (tiny scale)", infer_next, next_tables),
    "scalerl_losses": Layout("scalerl_losses", "ScaleRL losses (tiny scale)", infer_algo, losses_tables, scaling=True),
    # the calibrated mini testbeds (conf/experiment/mini_*.yaml): the same tables on a setting with room
    "mini_qerl": Layout("mini_qerl", "QeRL Table 1 (calibrated mini testbed)", infer_qerl, qerl_tables,
                        papers()["qerl"]["labels"]),
    "mini_next": Layout("mini_next", "NExt (calibrated mini testbed)", infer_next, next_tables),
    "mini_scalerl": Layout("mini_scalerl", "ScaleRL recipes (calibrated mini testbed)", infer_algo, losses_tables,
                           scaling=True),
    # a real pretrained model (model=smollm2) on generated word problems: base vs after RL, per engine
    "smollm2_wordproblems": Layout("smollm2_wordproblems", "SmolLM2-135M on word problems", infer_engine,
                                   pretrained_tables),
    # its tuning sweep: the same tables, an arm per setting (lr, temperature, shape, rank, steps)
    "smollm2_tune": Layout("smollm2_tune", "Tuning SmolLM2-135M GRPO on word problems", infer_setting,
                           functools.partial(pretrained_tables, heading="")),
    # QeRL's comparison on that real model (16-bit / NVFP4 / NVFP4 + AQN LoRA), with each arm's per-seed curve
    "smollm2_qerl": Layout("smollm2_qerl", "QeRL on SmolLM2-135M (word problems, fp32, vLLM)", infer_qerl,
                           smollm2_qerl_tables, papers()["qerl"]["labels"]),
    # the same comparison with each arm's own lr (chosen on the training side) and NF4 (QLoRA) as a fourth arm
    "smollm2_qerl_tuned": SMOLLM2_QERL_TUNED,
    # NExt on that real model: plain LoRA RL at N and 1.6N against NExt at N, alpha swept
    "smollm2_next": Layout("smollm2_next", "NExt on SmolLM2-135M (word problems, fp32, vLLM)", infer_next,
                           smollm2_next_tables, papers()["next"]["labels"]),
    "scalerl_loo": Layout("scalerl_loo", "ScaleRL leave-one-out (tiny scale)", infer_loo, loo_tables,
                          papers()["scalerl"]["loo_labels"], scaling=True),
    "scalerl_offpolicy": Layout("scalerl_offpolicy", "ScaleRL off-policy families (tiny scale)", infer_offpolicy,
                                offpolicy_tables, papers()["scalerl"]["offpolicy_labels"], scaling=True),
}


# Layouts of run directories that no sweep file launched (one run per seed, `python -m rlx.train ... seed=S
# hydra.run.dir=DIR/seedS`): the whole report from the runs, (root, jobs, plots, base) -> (markdown, PNGs, JSON).
RUN_LAYOUTS: dict[str, Callable[..., tuple[str, list[Path], dict]]] = {
    # real GSM8K (conf/experiment/smollm2_gsm8k.yaml; issue 43 items 3 and 5): readings, paired intervals, fits
    "smollm2_gsm8k": gsm8k_report,
}


def layout_names() -> list[str]:
    return sorted(LAYOUTS) + sorted(RUN_LAYOUTS)


def detect_layout(jobs: list[Run]) -> str:
    groups = {j.get("logger.group") for j in jobs} - {None}
    known = [g for g in groups if g in LAYOUTS or g in RUN_LAYOUTS]
    if len(known) == 1:
        return known[0]
    raise ValueError(f"cannot tell the sweep's layout from logger.group ({sorted(map(str, groups)) or 'unset'}); "
                     f"pass --layout, one of {', '.join(layout_names())}")


def build_report(root: str | Path, layout: str | None = None, plots: bool = True) -> tuple[str, list[Path]]:
    """(markdown, PNG paths) for the sweep under root; nothing is written except the PNGs."""
    md, pngs, _ = build(root, layout, plots)
    return md, pngs


def build(root: str | Path, layout: str | None = None, plots: bool = True, base: str | Path | None = None
          ) -> tuple[str, list[Path], dict | None]:
    """(markdown, PNG paths, the report's JSON document or None) for the runs under root; nothing is written
    except the PNGs. base: the step-0 per-problem file of the RUN_LAYOUTS that take one (smollm2_gsm8k)."""
    root = Path(root)
    jobs = read_sweep(root, marker=".hydra/config.yaml")
    name = layout or detect_layout(jobs)
    if name in RUN_LAYOUTS:
        return RUN_LAYOUTS[name](root, jobs, plots=plots, base=base)
    if name not in LAYOUTS:
        raise ValueError(f"unknown layout {name!r}; choose one of {', '.join(layout_names())}")
    if base is not None:
        raise ValueError(f"--base is for the {', '.join(RUN_LAYOUTS)} layout, not {name}")
    lay = LAYOUTS[name]
    for j in jobs:
        j.arm = lay.arm_of(j)
    arms = by_arm(jobs, lay.order)
    n_failed, n_unfinished = not_ok_counts(jobs)
    walls = [float(j.summary["wall_s"]) for j in jobs if j.summary.get("wall_s") is not None]
    lines = [f"# {lay.title}: `{root}`", "",
             f"{len(jobs)} jobs, {len(arms)} arms, {n_failed} failed, {n_unfinished} not finished"
             + (" (without summary.json: still running, killed, or crashed while being built outside a sweep)"
                if n_unfinished else "")
             + (f"; job wall time {sum(walls) / 60:.1f} min in all (longest job {max(walls):.0f} s)" if walls else "")
             + ".", ""]
    command = sweep_command(root)
    if command:
        lines += ["Command (from multirun.yaml; the sweep directory was "
                  f"`{root}`):", "", "```bash", command, "```", ""]
    lines += lay.tables(arms, jobs)
    lines += predictive_section(root)
    pngs: list[Path] = []
    if plots:
        eval_key = scaling_config(jobs).metric if lay.scaling else "val/acc"
        p = plot_curves(lay.shown(arms), root / "report_curves.png", lay.labels, eval_key)
        if p is not None:
            pngs.append(p)
        if lay.scaling:
            p = plot_scaling(arms, root / "report_scaling.png", lay.labels, scaling_config(jobs))
            if p is not None:
                pngs.append(p)
    if pngs:
        lines += ["", "## Plots", ""] + [f"![{p.stem}]({p.name})" for p in pngs]
    lines += completions_section([j for js in lay.shown(arms).values() for j in js], root)
    lines += ["", "## Jobs", ""] + runs_table(jobs)
    return "\n".join(lines) + "\n", pngs, None
