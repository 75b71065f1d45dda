"""Comparison: one row per recipe (or run) of a sweep, and ScaleRL's rule for deciding between two recipes: |dA| >
margin -> the higher A wins, else refit at a common A and the higher B wins (docs/scaling.md: ties, undetermined)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rlx.run.records import Run, read_sweep
from rlx.scaling.config import ScalingConfig, as_config, fitter_options
from rlx.scaling.curves import CurveFit
from rlx.scaling.fitting import fit_points, fit_sigmoid, fitted_points, target_compute
from rlx.scaling.grouping import by_run, evaluations, group_by_recipe, pool
from rlx.scaling.plot import Curve, save_curves


UNDETERMINED = "A at the edge of its grid: the data do not pin the asymptote (undetermined)"


@dataclass
class Verdict:
    """The outcome of ScaleRL's rule for one pair."""

    first: str
    second: str
    A_first: float
    A_second: float
    rule: str  # "asymptote" (|dA| > margin) | "efficiency" (refit at a common A, compare B) | "undetermined"
    winner: str | None  # None: a tie (equal B at the common A) or undetermined (an A at its grid edge)
    separable: bool | None  # the deciding parameter's bootstrap intervals do not overlap (None: no intervals)
    A_common: float | None = None
    B_first: float | None = None  # refitted with A = A_common
    B_second: float | None = None
    B_first_interval: tuple[float, float] | None = None
    B_second_interval: tuple[float, float] | None = None
    C_mid_first: float | None = None
    C_mid_second: float | None = None
    margin: float = 0.02
    at_edge: tuple[str, ...] = ()  # the recipes whose A sits at its grid edge (rule "undetermined")

    def describe(self) -> str:
        head = f"{self.first} vs {self.second}: A {self.A_first:.3f} vs {self.A_second:.3f}"
        sure = {True: "", False: " (bootstrap intervals overlap: not separable at this budget)",
                None: " (no bootstrap intervals)"}[self.separable]
        if self.rule == "undetermined":
            return f"{head} -> **undetermined**: {self.edge_note()}"
        if self.rule == "asymptote":
            return f"{head} (|dA| > {self.margin:g}) -> higher asymptote: **{self.winner}**{sure}"
        verdict = "more efficient: **{}**".format(self.winner) if self.winner is not None else "**tie** (equal B)"
        return (f"{head} (|dA| <= {self.margin:g}) -> refit at A = {self.A_common:.4f}: "
                f"B {self.B_first:.3f}{_interval(self.B_first_interval)} "
                f"vs {self.B_second:.3f}{_interval(self.B_second_interval)}, "
                f"C_mid {self.C_mid_first:.4g} vs {self.C_mid_second:.4g} -> {verdict}{sure}")

    def edge_note(self) -> str:
        return f"A of {' and '.join(self.at_edge)} at the edge of its grid (the data do not pin the asymptote)"


def scalerl_rule(first, second, margin: float = 0.02, fit_first=None, fit_second=None, **fit_kwargs) -> Verdict:
    """ScaleRL's rule on two recipes (label, compute [N], reward [N][, r0]); fit_kwargs go to every `fit_sigmoid`."""
    (la, ca, ra, r0a), (lb, cb, rb, r0b) = (tuple(first) + (None,))[:4], (tuple(second) + (None,))[:4]
    fa = fit_first if fit_first is not None else fit_sigmoid(ca, ra, r0a, **fit_kwargs)
    fb = fit_second if fit_second is not None else fit_sigmoid(cb, rb, r0b, **fit_kwargs)
    if fa.kind != "sigmoid" or fb.kind != "sigmoid":
        raise ValueError("ScaleRL's rule compares sigmoid fits")
    at_edge = tuple(label for label, fit in ((la, fa), (lb, fb)) if fit.A_at_edge)
    if at_edge:
        return Verdict(la, lb, fa.A, fb.A, "undetermined", None, None, margin=margin, at_edge=at_edge)
    if abs(fa.A - fb.A) > margin + 1e-12:
        winner = la if fa.A > fb.A else lb
        return Verdict(la, lb, fa.A, fb.A, "asymptote", winner, _disjoint(fa.intervals.get("A"), fb.intervals.get("A")),
                       margin=margin)
    common = round((fa.A + fb.A) / 2, 10)
    ga = fit_sigmoid(ca, ra, r0a, A=common, **fit_kwargs)
    gb = fit_sigmoid(cb, rb, r0b, A=common, **fit_kwargs)
    winner = None if ga.B == gb.B else la if ga.B > gb.B else lb
    return Verdict(la, lb, fa.A, fb.A, "efficiency", winner, _disjoint(ga.intervals.get("B"), gb.intervals.get("B")),
                   A_common=common, B_first=ga.B, B_second=gb.B, B_first_interval=ga.intervals.get("B"),
                   B_second_interval=gb.intervals.get("B"), C_mid_first=ga.C_mid, C_mid_second=gb.C_mid,
                   margin=margin)


@dataclass
class Row:
    """One table row: a recipe (runs pooled) or a single run."""

    label: str
    runs: list[Run]
    compute: np.ndarray  # [N] pooled evaluations after step 0
    reward: np.ndarray
    r0: float | None  # mean step-0 reward
    steps: int
    final_compute: float
    final_reward: float
    fit: CurveFit | None = None
    note: str = ""

    @property
    def n_failed(self) -> int:
        return sum(r.failed for r in self.runs)


@dataclass
class Comparison:
    root: Path
    cfg: ScalingConfig
    by: str
    rows: list[Row]
    target: float
    verdicts: list[Verdict] = field(default_factory=list)

    def markdown(self) -> str:
        cfg = self.cfg
        kinds = {r.fit.kind for r in self.rows if r.fit is not None}
        names = ("A", "B", "D") if kinds == {"power"} else ("A", "B", "C_mid")
        conf = int(round(cfg.confidence * 100))
        lines = [f"# Scaling comparison: {cfg.metric} vs compute ({cfg.compute})", "",
                 f"Runs under `{self.root}`, one row per {self.by}. Fit: {', '.join(sorted(kinds)) or 'none succeeded'}"
                 + ("; R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B) with R0 fixed" if "sigmoid" in kinds else "")
                 + ("; R(C) = A - D / C^B" if "power" in kinds else "")
                 + f". A: fit +/- half the {conf}% bootstrap interval; {names[1]}, {names[2]}: fit [{conf}% interval]. "
                 f"Fit window: compute >= max({cfg.exclude_before:g}, {cfg.exclude_fraction:g} x max) "
                 f"and <= {cfg.fit_fraction:g} x max.", "",
                 f"| {self.by} | runs | steps | compute ({cfg.compute}) | final {cfg.metric} | {names[0]} (+/-) | "
                 f"{names[1]} | {names[2]} | pred @ {self.target:.3g} | note |", "|" + "---|" * 10]
        for r in self.rows:
            runs = f"{len(r.runs)}" + (f" ({r.n_failed} failed)" if r.n_failed else "")
            cells = [r.label, runs, str(r.steps), f"{r.final_compute:.4g}", f"{r.final_reward:.4f}"]
            if r.fit is not None:
                p, iv = r.fit.params, r.fit.intervals
                a_cell = f"{p['A']:.3f}" + (f" +/- {(iv['A'][1] - iv['A'][0]) / 2:.3f}" if "A" in iv else "")
                cells += [a_cell, f"{p[names[1]]:.3g}{_interval(iv.get(names[1]))}",
                          f"{p[names[2]]:.4g}{_interval(iv.get(names[2]))}",
                          f"{float(r.fit.predict(self.target)):.4f}"]
            else:
                cells += ["-", "-", "-", "-"]
            cells.append(r.note.replace("|", "/"))
            lines.append("| " + " | ".join(cells) + " |")
        if self.verdicts:
            lines += ["", f"## ScaleRL's rule (|dA| <= {cfg.margin:g}: refit with A fixed at the mean, compare B)", ""]
            lines += [f"- {v.describe()}" for v in self.verdicts]
        return "\n".join(lines) + "\n"

    def curves(self) -> list[Curve]:
        return [Curve(r.label, r.compute, r.reward, r.fit) for r in self.rows]


def compare_dir(root: str | Path, cfg=None, by: str = "recipe", kind: str | None = None,
                runs: list[Run] | None = None) -> Comparison:
    """Fit every recipe (seeds pooled) or run under root and apply ScaleRL's rule; runs: those under root, if read."""
    cfg = as_config(cfg if cfg is not None else ScalingConfig())
    kind = kind or (cfg.fit if cfg.fit != "none" else "sigmoid")
    if by not in ("recipe", "run"):
        raise ValueError(f"by must be 'recipe' or 'run', got {by!r}")
    root = Path(root)
    runs = read_sweep(root) if runs is None else runs
    groups = group_by_recipe(runs, root)
    if by == "run":
        groups = by_run(groups, root)
    rows = [fit_group(label, members, cfg, kind) for label, members in groups.items()]
    finals = [r.final_compute for r in rows if np.isfinite(r.final_compute)]
    target = target_compute(cfg, max(finals) if finals else 0.0)
    rows.sort(key=lambda r: (r.fit is None, -(r.fit.A if r.fit is not None else 0.0), r.label))
    comparison = Comparison(root, cfg, by, rows, target)
    # the rule decides between recipes; per-run rows (by="run") are for looking at the seed spread
    fitted = [r for r in rows if r.fit is not None and r.fit.kind == "sigmoid"] if by == "recipe" else []
    for i, a in enumerate(fitted):
        for b in fitted[i + 1 :]:
            try:
                comparison.verdicts.append(compare_rows(a, b, cfg))
            except ValueError as err:
                a.note = a.note or f"refit vs {b.label} failed: {err}"
    return comparison


def compare_rows(a: Row, b: Row, cfg: ScalingConfig) -> Verdict:
    """ScaleRL's rule between two fitted rows; the refits see the same points and options as the fits."""
    return scalerl_rule((a.label, *fitted_points(a.compute, a.reward, cfg), a.r0),
                        (b.label, *fitted_points(b.compute, b.reward, cfg), b.r0), cfg.margin,
                        fit_first=a.fit, fit_second=b.fit, **fitter_options(cfg, "sigmoid"))


def write_comparison(comparison: Comparison, prefix: str = "compare") -> tuple[Path, Path, Path]:
    """Save <root>/<prefix>.md, .png and .json; returns their paths."""
    root, cfg = comparison.root, comparison.cfg
    md = root / f"{prefix}.md"
    md.write_text(comparison.markdown())
    png = save_curves(root / f"{prefix}.png", comparison.curves(), cfg.compute, cfg.metric, comparison.target,
                      title=f"{cfg.metric} vs {cfg.compute} ({comparison.by}s under {root.name})", with_asymptotes=True)
    js = root / f"{prefix}.json"
    rows = [{"label": r.label, "runs": [str(x.path) for x in r.runs], "failed": r.n_failed, "steps": r.steps,
             "final_compute": r.final_compute, "final_reward": r.final_reward,
             "fit": None if r.fit is None else {"kind": r.fit.kind, "params": r.fit.params,
                                                "intervals": {k: list(v) for k, v in r.fit.intervals.items()},
                                                **r.fit.stats()},
             "note": r.note} for r in comparison.rows]
    doc = {"root": str(root), "by": comparison.by, "metric": cfg.metric, "compute": cfg.compute,
           "target_compute": comparison.target, "rows": rows, "verdicts": [v.__dict__ for v in comparison.verdicts]}
    js.write_text(json.dumps(doc, indent=2, allow_nan=True))
    return md, png, js


def fit_group(label: str, runs: list[Run], cfg: ScalingConfig, kind: str = "sigmoid") -> Row:
    """Pool the runs' evaluations after step 0 (R0: their mean step-0 reward) and fit the config's curve."""
    series, finals, notes = [], [], []
    for run in runs:
        try:
            s = evaluations(run, cfg.metric, cfg.compute)
        except ValueError as err:
            notes.append(str(err))
            continue
        series.append(s)
        if not run.failed:
            finals.append(s.reward[-1])
    if not finals and series:  # every run failed: report where they got to
        finals = [s.reward[-1] for s in series]
    c, y, r0 = pool(series)
    last_c = [s.compute[-1] for s in series]
    row = Row(label, runs, c, y, r0, max((r.last_step for r in runs), default=0),
              float(max(last_c)) if last_c else float("nan"), float(np.mean(finals)) if finals else float("nan"))
    if not c.size and series:
        notes.append("no evaluation after step 0")
    if c.size:
        try:
            row.fit = fit_points(c, y, cfg, kind=kind, r0=r0)
        except ValueError as err:
            notes.append(f"no fit: {err}")
        else:
            if row.fit.A_at_edge:
                notes.append(UNDETERMINED)
    row.note = "; ".join(notes)
    return row


def _disjoint(a, b) -> bool | None:
    if a is None or b is None:
        return None
    return a[1] < b[0] or b[1] < a[0]


def _interval(iv) -> str:
    return "" if iv is None else f" [{iv[0]:.3g}, {iv[1]:.3g}]"
