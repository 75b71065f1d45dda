"""`python -m rlx.scaling.fit RUN_DIR... [--compute flops] [--target C]`: fit each run, print, plot.

Each RUN_DIR may be a run (holds metrics.jsonl) or a sweep directory (every run below it is fitted).
Prints A, B, C_mid (or D) with bootstrap intervals and the predicted reward at the target compute,
and saves one PNG of data, fitted curves, extrapolation and band (+ a JSON next to it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

from rlx.scaling.cli import add_options, config_from_args
from rlx.scaling.fits import CurveFit
from rlx.scaling.logs import find_runs, read_run
from rlx.scaling.plot import Curve, save_curves
from rlx.scaling.recipes import group_by_recipe, run_label
from rlx.scaling.runs import fit_points, fit_report, pool, target_compute


def format_fit(name: str, fit: CurveFit, report: dict, metric: str, unit: str) -> str:
    conf = int(round(fit.confidence * 100))
    window = f"{unit} in [{fit.compute_min:.4g}, {fit.compute_max:.4g}]"
    lines = [f"{name}: {fit.kind} fit on {fit.n_points} points, {window}"]
    for k, v in fit.params.items():
        iv = fit.intervals.get(k)
        edge = "   (at the edge of the A grid: the data do not pin the asymptote)" if k == "A" and not 0 < v < 1 else ""
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


def _labels(runs) -> dict[str, str]:
    """Legend labels: recipe (what differs in the configs) plus seed; the directory when that is ambiguous."""
    root = Path(os.path.commonpath([str(r.path) for r in runs])) if len(runs) > 1 else runs[0].path.parent
    labels = {str(r.path): run_label(r, recipe, root) for recipe, rs in group_by_recipe(runs, root).items() for r in rs}
    if len(set(labels.values())) < len(labels):
        labels = {str(r.path): str(r.path) for r in runs}
    return labels


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlx.scaling.fit", description=__doc__.splitlines()[0])
    parser.add_argument("run_dirs", nargs="+", type=Path, help="run or sweep directories")
    parser.add_argument("--out", type=Path, default=None,
                        help="PNG path (default: RUN_DIR/scaling_fit.png for one run, ./scaling_fit.png otherwise)")
    add_options(parser)
    args = parser.parse_args(argv)

    try:
        paths = [p for d in args.run_dirs for p in find_runs(d)]
        runs = [read_run(p) for p in paths]
    except ValueError as err:
        parser.error(str(err))
    cfg = config_from_args(args, runs)

    series, fitted = {}, {}
    for run in runs:
        name = str(run.path)
        try:
            series[name] = run.series(cfg.metric, cfg.compute)
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

    out = args.out or (paths[0] / "scaling_fit.png" if len(paths) == 1 else Path("scaling_fit.png"))
    labels = _labels(runs)
    curves = [Curve(labels[n], s.compute, s.reward, fitted.get(n)) for n, s in series.items()]
    save_curves(out, curves, cfg.compute, cfg.metric, target, title=f"{cfg.fit} fits of {cfg.metric} vs {cfg.compute}")
    out.with_suffix(".json").write_text(json.dumps({"reports": reports, "target_compute": target}, indent=2))
    print(f"saved {out} and {out.with_suffix('.json')}")
    return 0 if fitted else 1


if __name__ == "__main__":
    sys.exit(main())
