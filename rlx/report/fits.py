"""ScaleRL's method run by run: each run fitted on part of its compute and judged on the rest (`predictions`), and
each run's full fit compared across arms over seeds (`seed_fits`); the pooled per-arm fit is rlx.report.scalerl's."""

from __future__ import annotations

from fractions import Fraction

from rlx.report.predict import fit_header, fit_row, part_name, predictability, run_scaling
from rlx.report.tables import md_table, paired_by_seed, paired_cell, seed_verdict, t_interval
from rlx.run.records import Run
from rlx.scaling.fitting import fit_points
from rlx.scaling.grouping import evaluations, pool


def predictions(ctx, fractions: tuple = (0.5, "1/3"), metric: str | None = None, compute: str | None = None
                ) -> list[str]:
    """Per run: the sigmoid fitted on the first `fraction` of its compute, the rest predicted against its band."""
    jobs = [j for js in ctx.arms.values() for j in js if j.ok]
    if not jobs:
        return []
    metric = metric or run_scaling(jobs[0]).metric
    x = compute or run_scaling(jobs[0]).compute
    out = ["## Predictions from part of the compute (ScaleRL)", "",
           f"Each run's `{metric}` against perf/compute/{x}: the sigmoid fitted by rlx.scaling on the evaluations up "
           f"to a fraction of the run's largest compute (R0 fixed at the step-0 evaluation), the rest predicted. "
           f"Band: the fit's bootstrap band; a measured point inside it is one the fit foresaw.", ""]
    for frac in fractions:
        frac = float(Fraction(str(frac)))  # 0.5, or "1/3" as YAML writes a third
        rows = []
        for arm, js in ctx.arms.items():
            for j in sorted((j for j in js if j.ok), key=lambda r: str(r.seed)):
                rep, _ = predictability(j, metric, compute=compute, fraction=frac)
                held = rep["heldout"]
                inside = [h["inside"] for h in held if "inside" in h]
                rows.append([ctx.spec.labels.get(arm, arm)] + fit_row(rep)
                            + [f"{sum(inside)}/{len(inside)}" if inside else "–"])
        out += [f"### fitted on the {part_name(frac)}", ""]
        out += md_table(["arm"] + fit_header(frac) + ["held-out points inside the band"], rows) + [""]
    return out


def full_fit(run: Run, metric: str, compute: str | None):
    """The run's sigmoid on all its evaluations (R0 = its step-0 evaluation), or the reason there is none."""
    cfg = run_scaling(run, 1.0)
    try:
        x, y, r0 = pool([evaluations(run, metric, compute or cfg.compute)])
        return fit_points(x, y, cfg, r0=r0), None
    except ValueError as err:
        return None, str(err)


def seed_fits(ctx, metric: str | None = None, compute: str | None = None, against: str | None = None) -> list[str]:
    """Each run's own A, B and C_mid; per arm their mean and t-interval; each arm against `against` (the last)."""
    jobs = [j for js in ctx.arms.values() for j in js if j.ok]
    if not jobs:
        return []
    metric = metric or run_scaling(jobs[0]).metric
    fits, rows, notes = {}, [], []
    for arm, js in ctx.arms.items():
        per = {}
        for j in (j for j in js if j.ok):
            fit, why = full_fit(j, metric, compute)
            if fit is None:
                notes.append(f"- {arm} seed {j.seed}: no fit ({why})")
            else:
                per[j.path] = fit.params | {"A_at_edge": bool(fit.A_at_edge)}
        fits[arm] = per
        cells = []
        for k, fmt in (("A", "{:.3f}"), ("B", "{:.2f}"), ("C_mid", "{:.3g}")):
            m, lo, hi = t_interval([p[k] for p in per.values()])
            cells.append("–" if m is None else fmt.format(m) + (f" [{fmt.format(lo)}, {fmt.format(hi)}]"
                                                                 if lo is not None else " (one seed)"))
        edge = sum(p["A_at_edge"] for p in per.values())
        rows.append([ctx.spec.labels.get(arm, arm), f"{len(per)}/{len(js)}"] + cells
                    + [f"{edge} at the grid edge" if edge else ""])
    out = ["## A, B and C_mid over seeds", "",
           f"Each run's sigmoid on all its `{metric}` evaluations (R0 its step-0 evaluation); per arm the mean over "
           f"seeds with its 95% Student-t interval. An A at its grid edge is undetermined.", ""]
    out += md_table(["arm", "fitted seeds", "A [95% t]", "B [95% t]", "C_mid [95% t]", "note"], rows) + [""]
    return out + _against(ctx, fits, against or list(ctx.arms)[-1]) + notes


def _against(ctx, fits: dict, ref: str) -> list[str]:
    """Each arm's A and B minus `ref`'s, paired by seed, with the verdict of the 95% t-interval."""
    value = lambda k: lambda j: fits.get(j.arm, {}).get(j.path, {}).get(k)  # noqa: E731
    rows = []
    for arm in ctx.arms:
        if arm == ref:
            continue
        for k, fmt in (("A", "{:+.3f}"), ("B", "{:+.2f}")):
            diffs = paired_by_seed(ctx.arms, arm, ref, value(k))
            rows.append([f"{arm} - {ref}", k, paired_cell(diffs, fmt), seed_verdict(diffs)])
    if not rows:
        return []
    return [f"Against {ref}, paired by seed (the same seed's runs share their data order and initial adapter):",
            ""] + md_table(["arms", "parameter", "paired difference [95% t]", "verdict (> 0 holds)"], rows) + [""]
