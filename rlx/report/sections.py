"""The kinds of section a `report:` block can declare (rlx.report.spec), and the ways a job's arm is read. A section
takes the context and its options and returns markdown lines; `lr_choice` narrows what the later ones count."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path

from rlx.report.fits import predictions, seed_fits
from rlx.report.lr_choice import at_chosen_lr, selection_table, stages
from rlx.report.next import infer_next, next_per_seed_tables, next_tables
from rlx.report.pretrained import infer_engine, infer_setting, pretrained_tables
from rlx.report.qerl import infer_qerl, infer_speed, qerl_tables, speed_tables
from rlx.report.scalerl import infer_algo, infer_loo, infer_offpolicy, loo_tables, losses_tables, offpolicy_tables
from rlx.report.spec import ReportSpec
from rlx.report.tables import (acc_points, beyond_points, first_tenth_mean, md_table, mean_metric, paired_by_seed,
                               paired_cell, seed_verdict, stat)
from rlx.run.records import Run

INFER = {"qerl": infer_qerl, "speed": infer_speed, "next": infer_next, "algo": infer_algo, "loo": infer_loo,
         "offpolicy": infer_offpolicy, "engine": infer_engine, "setting": infer_setting,
         "env": lambda j: str(j.get("env.name", "none"))}  # rlx's own task (none) beside an environment


@dataclass
class Context:
    spec: ReportSpec
    arms: dict[str, list[Run]]  # what the sections count, arm by arm
    jobs: list[Run]  # the runs the sections count
    root: Path
    done: bool = False  # a section found nothing left to report: the sections after it are skipped


def qerl_table1(ctx: Context, row: str = "rlx tiny (this sweep)",
                sixteen_bit: str = "the unquantized base (fp32 for the tiny model)", full_ft: bool = False,
                pairs: list | None = None, order: list[str] | None = None) -> list[str]:
    """QeRL's Table 1 and its companions; `order`: the columns' arms when not the report's own."""
    return qerl_tables(ctx.arms, ctx.jobs, order or ctx.spec.arms, row, sixteen_bit, full_ft,
                       None if pairs is None else tuple(tuple(p) for p in pairs))


def lr_choice(ctx: Context) -> list[str]:
    """Each arm's lr chosen on the training side; the sections after it count each arm at its chosen lr."""
    labels = ctx.spec.labels
    chosen, choices = at_chosen_lr(ctx.arms, ctx.spec.name)
    first, second = stages(ctx.jobs)
    out = ["## Learning rate per arm (training side)", ""]
    if not first:  # stage 2 alone: the lrs were chosen by stage 1's sweep
        out += ["Each arm ran at one lr (chosen on stage 1's training reward: `python -m rlx.report.select_lr "
                "<stage 1 directory>`): " + ", ".join(f"{labels.get(a, a)} {c.lrs[0].lr:g}"
                                                      for a, c in choices.items()) + ".", ""]
    else:
        out += selection_table(choices, labels) + [""]
    every = len(ctx.jobs)
    ctx.arms, ctx.jobs = chosen, [j for js in chosen.values() for j in js]
    if not chosen:
        ctx.done = True
        return out + ["No arm is decided yet: the tables below need each arm's runs at its chosen lr."]
    which = ("stage-2 seeds at its chosen lr (stage 1's seed 0 chose the lr and is not counted; an arm with no "
             "stage-2 run yet shows its stage-1 run there, one seed)" if second
             else "stage-1 run (seed 0) at its chosen lr: a preview, one seed, selected for its training reward")
    return out + [f"The tables below count each arm's {which} ({len(ctx.jobs)} of {every} runs). Each arm is at "
                  f"its own lr, so an arm-vs-arm difference includes the lr's effect, as the paper's per-arm "
                  f"settings do.", ""]


def value_of(name: str):
    """A per-run number by name: `acc_points` (final val/acc, points), `mean:<metric>` (mean over RL steps)."""
    if name == "acc_points":
        return acc_points
    if name.startswith("mean:"):
        return mean_metric(name[len("mean:"):])
    raise ValueError(f"claims: value {name!r} is not acc_points or mean:<metric>")


def claims(ctx: Context, rows: list[dict]) -> list[str]:
    """Each claim as a paired difference over seeds with its verdict (accuracy also without the top gold)."""
    labels, out = ctx.spec.labels, []
    for r in rows:
        a, b, fmt = r["arm"], r["against"], r.get("format", "{:+.1f}")
        diffs = paired_by_seed(ctx.arms, a, b, value_of(r["value"]))
        row = [r["claim"], f"{labels.get(a, a)} - {labels.get(b, b)}", paired_cell(diffs, fmt), seed_verdict(diffs)]
        if r["value"] == "acc_points":
            guessless = paired_by_seed(ctx.arms, a, b, beyond_points)
            row += [paired_cell(guessless, fmt), seed_verdict(guessless)] if guessless else ["–", "–"]
        else:
            row += ["", ""]
        out.append(row)
    return ["", "### The paper's claims, seed by seed", "",
            "Paired over the seeds both arms finished, each arm at its own lr: mean difference [95% t-interval] "
            "(n seeds); holds needs the interval above 0, for the '>=' claim too (no non-inferiority margin is "
            "assumed). Accuracy in points; the last two columns read accuracy on the held-out problems whose gold "
            "is not the set's most common gold, so a policy that gives one answer everywhere gains nothing there "
            "(rlx.eval.guess, docs/eval.md 'One answer everywhere').", ""] + md_table(
        ["claim", "difference", "paired difference", "verdict", "without the most common gold", "verdict"], out)


def why(ctx: Context, columns: list[dict]) -> list[str]:
    """Per arm, training-side metrics (mean over RL steps, or `reduce: first_tenth`), mean ± std over seeds."""
    rows = []
    for arm, js in ctx.arms.items():
        cells = []
        for c in columns:
            fn = mean_metric(c["metric"], reducer=first_tenth_mean) if c.get("reduce") == "first_tenth" \
                else mean_metric(c["metric"])
            scale = c.get("scale", 1)
            cells.append(stat(js, fn).cell(scale, 1 if scale == 100 else 6))
        rows.append([ctx.spec.labels.get(arm, arm)] + cells)
    return ["", "### Why the arms differ", "",
            "Per run, the mean over RL steps (or over its first 10% of steps), then mean ± std over seeds. A "
            "zero-variance group (every sample rewarded alike) gives no gradient; a truncated completion hit "
            "rollout.max_new_tokens; the trainer-engine mismatch compares the engine's behaviour log-probs with "
            "the trainer's (AQN's noise lives in the engine's weights only).", ""] + md_table(
        ["arm"] + [c["column"] for c in columns], rows)


SECTIONS = {
    "qerl_table1": qerl_table1,
    "qerl_speed": lambda ctx: speed_tables(ctx.arms, ctx.jobs),
    "next": lambda ctx: next_tables(ctx.arms, ctx.jobs),
    "next_per_seed": lambda ctx: next_per_seed_tables(ctx.arms, ctx.jobs),
    "scalerl_fits": lambda ctx: losses_tables(ctx.arms, ctx.jobs),
    "scalerl_loo": lambda ctx: loo_tables(ctx.arms, ctx.jobs),
    "scalerl_offpolicy": lambda ctx: offpolicy_tables(ctx.arms, ctx.jobs),
    "accuracy": lambda ctx, heading="arm: ": pretrained_tables(ctx.arms, ctx.jobs, heading=heading),
    "lr_choice": lr_choice,
    "claims": claims,
    "why": why,
    "predictions": predictions,
    "seed_fits": seed_fits,
    "blank": lambda ctx: [""],
}


def check_options(spec: ReportSpec, kinds: dict = SECTIONS) -> None:
    """Every section's options are ones it takes (before any run is read)."""
    for name, opts in spec.sections:
        try:
            inspect.signature(kinds[name]).bind(None, **opts)
        except TypeError as e:
            raise ValueError(f"report of {spec.name}: section {name}: {e}") from None
