"""Compute -> reward scaling curves (ScaleRL) from run logs alone, never importing torch (docs/scaling.md). Names are
imported lazily, so `rlx.config` (which imports `rlx.scaling.config`) does not pay for scipy and matplotlib."""

from importlib import import_module

_EXPORTS = {name: f"rlx.scaling.{module}" for module, names in {
    "config": ("ScalingConfig", "as_config"),
    "curves": ("sigmoid", "power_law", "CurveFit", "SigmoidFit", "PowerFit"),
    "fitting": ("fit_sigmoid", "fit_power", "FITTERS", "fit_points"),
    "grouping": ("fit_run", "evaluations"),
    "compare": ("Verdict", "Comparison", "scalerl_rule", "compare_dir", "write_comparison"),
}.items() for name in names}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'rlx.scaling' has no attribute {name!r}")
