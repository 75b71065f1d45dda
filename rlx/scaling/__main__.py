"""Command line of rlx.scaling (docs/scaling.md, "Commands"): `fit RUN_DIR...` (rlx-fit), `compare SWEEP_DIR`
(rlx-compare). Every fit option defaults to the runs' own `scaling.*` config, else the schema default."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path

import numpy as np

from rlx.run.records import Run, read_sweep
from rlx.scaling.compare import compare_dir, write_comparison
from rlx.scaling.config import COMPUTE_UNITS, ScalingConfig, as_config
from rlx.scaling.curves import CurveFit
from rlx.scaling.fitting import fit_points, target_compute
from rlx.scaling.grouping import evaluations, fit_report, group_by_recipe, pool, run_label
from rlx.scaling.plot import Curve, save_curves

# option -> ScalingConfig field; None means "take it from the runs' own scaling config, else the default"
_OPTIONS = {
    "compute": ("--compute", str, f"x axis: {' | '.join(COMPUTE_UNITS)} (perf/compute/<unit>)"),
    "metric": ("--metric", str, "held-out reward on the y axis"),
    "exclude_before": ("--exclude-before", float, "leave out points with compute below this (early window)"),
    "exclude_fraction": ("--exclude-fraction", float, "leave out points below this fraction of the max compute"),
    "fit_fraction": ("--fit-fraction", float, "fit on compute <= this fraction of the max; the rest is held out"),
    "target_compute": ("--target", float, "predict the reward at this compute (default 4x the max observed)"),
    "bootstrap": ("--bootstrap", int, "bootstrap resamples for intervals and the band (0: none)"),
    "confidence": ("--confidence", float, "interval level"),
    "a_step": ("--a-step", float, "grid step of A"),
    "n_cmid": ("--n-cmid", int, "number of log-spaced C_mid grid values"),
    "min_points": ("--min-points", int, "fewest evaluation points to fit"),
    "margin": ("--margin", float, "ScaleRL's rule: |dA| within this -> compare B at a common A"),
    "seed": ("--seed", int, "bootstrap seed"),
}


def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--fit", choices=("sigmoid", "power"), default="sigmoid", help="curve family (default sigmoid)")
    defaults = ScalingConfig()
    for name, (flag, typ, text) in _OPTIONS.items():
        default = getattr(defaults, name)
        parser.add_argument(flag, dest=name, type=typ, default=None, help=f"{text} (default {default!r})")


def config_from_args(args: argparse.Namespace, runs: list[Run]) -> ScalingConfig:
    """Command-line value, else the first run's `scaling.<field>` from its .hydra config, else the schema default."""
    values = {"fit": args.fit}
    logged = next((r.flat for r in runs if any(k.startswith("scaling.") for k in r.flat)), {})
    for f in dataclasses.fields(ScalingConfig):
        if f.name == "fit":
            continue
        given = getattr(args, f.name, None)
        if given is not None:
            values[f.name] = given
        elif logged.get(f"scaling.{f.name}") is not None:
            try:
                values[f.name] = type(f.default)(logged[f"scaling.{f.name}"])
            except (TypeError, ValueError):  # e.g. an unresolved ${...} interpolation: keep the default
                pass
    return as_config(ScalingConfig(**values))


def format_fit(name: str, fit: CurveFit, report: dict, metric: str, unit: str) -> str:
    conf = int(round(fit.confidence * 100))
    window = f"{unit} in [{fit.compute_min:.4g}, {fit.compute_max:.4g}]"
    lines = [f"{name}: {fit.kind} fit on {fit.n_points} points, {window}"]
    for k, v in fit.params.items():
        iv = fit.intervals.get(k)
        edge = ("   (at the edge of the A grid: the data do not pin the asymptote; undetermined)"
                if k == "A" and fit.A_at_edge else "")
        lines.append(f"  {k:<6}= {v:.5g}" + (f"   {conf}% CI [{iv[0]:.5g}, {iv[1]:.5g}]" if iv else "") + edge)
    if fit.kind == "sigmoid":
        lines.append(f"  R0    = {fit.R0:.5g} (fixed: reward at zero compute)")
    lines.append(f"  rmse  = {report['scaling/rmse']:.4g}")
    r = {k.removeprefix("scaling/"): v for k, v in report.items()}
    pred = f"  predicted {metric} at {unit}={r['target_compute']:.4g}: {r['pred_at_target']:.4f}"
    if "pred_at_target_lo" in r:
        pred += f"   {conf}% band [{r['pred_at_target_lo']:.4f}, {r['pred_at_target_hi']:.4f}]"
    lines.append(pred)
    if "heldout_mae" in r:
        lines.append(f"  held-out points: {int(r['heldout_points'])}, mean |error| {r['heldout_mae']:.4f}")
    return "\n".join(lines)


def fit_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rlx-fit", description="Fit each run's reward-vs-compute curve; print, plot.")
    parser.add_argument("run_dirs", nargs="+", type=Path, help="run or sweep directories")
    parser.add_argument("--out", type=Path, default=None,
                        help="PNG path (default: RUN_DIR/scaling_fit.png for one run, ./scaling_fit.png otherwise)")
    add_options(parser)
    args = parser.parse_args(argv)
    try:
        runs = [r for d in args.run_dirs for r in read_sweep(d)]
    except ValueError as err:
        parser.error(str(err))
    cfg = config_from_args(args, runs)

    series, fitted = {}, {}
    for run in runs:
        name = str(run.path)
        try:
            series[name] = evaluations(run, cfg.metric, cfg.compute)
            compute, reward, r0 = pool([series[name]])
            fitted[name] = fit_points(compute, reward, cfg, r0=r0)
        except ValueError as err:
            print(f"{name}: fit failed: {err}\n")
    if not series:
        print("nothing to plot: no run logs the metric", file=sys.stderr)
        return 1
    target = target_compute(cfg, max(float(np.max(s.compute)) for s in series.values()))

    reports = {}
    for name, fit in fitted.items():
        reports[name] = fit_report(fit, series[name].compute, series[name].reward, target)
        print(format_fit(name, fit, reports[name], cfg.metric, cfg.compute) + "\n")

    out = args.out or (runs[0].path / "scaling_fit.png" if len(runs) == 1 else Path("scaling_fit.png"))
    # legend labels: recipe (what differs in the configs) plus seed; the directory when that is ambiguous
    root = Path(os.path.commonpath([str(r.path) for r in runs])) if len(runs) > 1 else runs[0].path.parent
    labels = {str(r.path): run_label(r, recipe, root) for recipe, rs in group_by_recipe(runs, root).items() for r in rs}
    if len(set(labels.values())) < len(labels):
        labels = {str(r.path): str(r.path) for r in runs}
    curves = [Curve(labels[n], s.compute, s.reward, fitted.get(n)) for n, s in series.items()]
    save_curves(out, curves, cfg.compute, cfg.metric, target, title=f"{cfg.fit} fits of {cfg.metric} vs {cfg.compute}")
    out.with_suffix(".json").write_text(json.dumps({"reports": reports, "target_compute": target}, indent=2))
    print(f"saved {out} and {out.with_suffix('.json')}")
    return 0 if fitted else 1


def compare_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rlx-compare",
                                     description="Compare the recipes (or runs) of a sweep directory from their logs.")
    parser.add_argument("dir", type=Path, help="sweep directory (run directories at any depth)")
    parser.add_argument("--by", choices=("recipe", "run"), default="recipe",
                        help="one row per recipe (seeds pooled) or per run (default recipe)")
    parser.add_argument("--prefix", default="compare", help="output file names: DIR/<prefix>.{md,png,json}")
    add_options(parser)
    args = parser.parse_args(argv)
    try:
        runs = read_sweep(args.dir)
        comparison = compare_dir(args.dir, config_from_args(args, runs), by=args.by, kind=args.fit, runs=runs)
    except ValueError as err:
        parser.error(str(err))
    md, png, js = write_comparison(comparison, args.prefix)
    print(comparison.markdown())
    print(f"saved {md}, {png}, {js}")
    return 0


COMMANDS = {"fit": fit_main, "compare": compare_main}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] not in COMMANDS:
        print(f"usage: python -m rlx.scaling {{{','.join(COMMANDS)}}} ...  (see --help of each)", file=sys.stderr)
        return 2
    return COMMANDS[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main())
