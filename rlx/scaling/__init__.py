"""Compute -> reward scaling curves (ScaleRL) from run logs alone: fits, bootstrap intervals, comparison.

Needs no model code and never imports torch. Notebook use:
    from rlx.scaling import fit_sigmoid
    fit = fit_sigmoid(compute, reward)            # R0 from the zero-compute evaluation
    fit.A, fit.B, fit.C_mid, fit.intervals, fit.predict(1e5), fit.band(c)
Commands: `python -m rlx.scaling.fit RUN_DIR...`, `python -m rlx.compare SWEEP_DIR`.

Names are imported lazily, so `rlx.config` (which imports `rlx.scaling.config`) does not pay for
scipy and matplotlib.
"""

from importlib import import_module

_EXPORTS = {
    "ScalingConfig": "rlx.scaling.config",
    "sigmoid": "rlx.scaling.curves",
    "power_law": "rlx.scaling.curves",
    "CurveFit": "rlx.scaling.fits",
    "SigmoidFit": "rlx.scaling.fits",
    "PowerFit": "rlx.scaling.fits",
    "fit_sigmoid": "rlx.scaling.sigmoid_fit",
    "fit_power": "rlx.scaling.power_fit",
    "FITTERS": "rlx.scaling.runs",
    "fit_points": "rlx.scaling.runs",
    "fit_run": "rlx.scaling.runs",
    "read_run": "rlx.scaling.logs",
    "find_runs": "rlx.scaling.logs",
    "Verdict": "rlx.scaling.compare",
    "Comparison": "rlx.scaling.compare",
    "scalerl_rule": "rlx.scaling.compare",
    "compare_dir": "rlx.scaling.compare",
    "write_comparison": "rlx.scaling.compare",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'rlx.scaling' has no attribute {name!r}")
