"""Compute -> reward scaling curves (ScaleRL) from run logs alone: fits, bootstrap intervals, comparison.

Needs no model code and never imports torch. Files by role: `config` (options, the one mapping
to fitter arguments), `curves` (families, fit results, shared numerics), `fitting` (the fitters),
`grouping` (runs -> points, recipes, `fit_run`), `compare` (ScaleRL's rule, recipe tables), `plot`,
`__main__` (command line). Notebook use:
    from rlx.scaling import fit_sigmoid
    fit = fit_sigmoid(compute, reward)            # R0 from the zero-compute evaluation
    fit.A, fit.B, fit.C_mid, fit.intervals, fit.predict(1e5), fit.band(c)
Commands: `rlx-fit RUN_DIR...` / `python -m rlx.scaling fit`, `rlx-compare SWEEP_DIR` / `python -m rlx.scaling compare`.

Names are imported lazily, so `rlx.config` (which imports `rlx.scaling.config`) does not pay for
scipy and matplotlib.
"""

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
