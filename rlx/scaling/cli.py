"""Command-line options shared by `python -m rlx.scaling.fit` and `python -m rlx.compare`."""

from __future__ import annotations

import argparse
import dataclasses

from rlx.scaling.config import ScalingConfig
from rlx.scaling.logs import COMPUTE_UNITS, RunLog
from rlx.scaling.runs import as_config

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


def config_from_args(args: argparse.Namespace, runs: list[RunLog]) -> ScalingConfig:
    """Command-line value, else the first run's `scaling.<field>` from its .hydra config, else the schema default."""
    values = {"fit": args.fit}
    logged = next((r.config for r in runs if any(k.startswith("scaling.") for k in r.config)), {})
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
