"""Fit a run (or pooled runs) from its logs under a ScalingConfig; `fit_run` is what the training loop calls."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np

from rlx.scaling.config import ScalingConfig
from rlx.scaling.fits import CurveFit
from rlx.scaling.logs import COMPUTE_UNITS, Series, read_run
from rlx.scaling.plot import Curve, save_curves
from rlx.scaling.power_fit import fit_power
from rlx.scaling.sigmoid_fit import fit_sigmoid

FITTERS = {"sigmoid": fit_sigmoid, "power": fit_power}  # scaling.fit -> fitter; "none" fits nothing

FIT_JSON, FIT_PNG = "scaling_fit.json", "scaling_fit.png"


def as_config(cfg) -> ScalingConfig:
    """A ScalingConfig from a ScalingConfig, an OmegaConf node or a dict (unknown keys are an error); validated."""
    if not isinstance(cfg, ScalingConfig):
        names = {f.name for f in dataclasses.fields(ScalingConfig)}
        given = dict(cfg.items()) if hasattr(cfg, "items") else {}
        unknown = set(given) - names
        if unknown:
            raise ValueError(f"unknown scaling option(s): {', '.join(sorted(unknown))}")
        cfg = ScalingConfig(**given)
    if cfg.fit != "none" and cfg.fit not in FITTERS:
        raise ValueError(f"unknown scaling.fit {cfg.fit!r}; choose none or one of {', '.join(FITTERS)}")
    if cfg.compute not in COMPUTE_UNITS:
        raise ValueError(f"unknown scaling.compute {cfg.compute!r}; choose one of {', '.join(COMPUTE_UNITS)}")
    if not 0.0 < cfg.fit_fraction <= 1.0:
        raise ValueError(f"scaling.fit_fraction must be in (0, 1], got {cfg.fit_fraction}")
    if cfg.target_compute < 0 or cfg.bootstrap < 0 or cfg.margin < 0:
        raise ValueError("scaling.target_compute, bootstrap and margin must be >= 0")
    return cfg


def pool(series: list[Series]) -> tuple[np.ndarray, np.ndarray, float | None]:
    """(compute [N], reward [N], R0): the evaluations after step 0 of every run, and R0 = mean step-0 reward.

    The step-0 evaluation anchors R0 whatever compute it carries (gpu_hours at step 0 may count setup
    time), and stays out of the fitted points. R0 is None when no run has a step-0 evaluation.
    """
    r0s = [s.r0 for s in series if s.r0 is not None]
    keep = [s.step > 0 if s.r0 is not None else np.ones(len(s), bool) for s in series]
    compute = np.concatenate([s.compute[k] for s, k in zip(series, keep)]) if series else np.zeros(0)
    reward = np.concatenate([s.reward[k] for s, k in zip(series, keep)]) if series else np.zeros(0)
    return compute, reward, (float(np.mean(r0s)) if r0s else None)


def fit_points(
    compute, reward, cfg: ScalingConfig, kind: str | None = None, r0: float | None = None, **overrides
) -> CurveFit:
    """Fit evaluations with the config's options; points beyond fit_fraction * max compute are held out.

    r0: the sigmoid's fixed R0 (default: the reward of the zero-compute evaluations among the points).
    """
    kind = kind or cfg.fit
    if kind not in FITTERS:
        raise ValueError(f"nothing to fit with scaling.fit={kind!r}; choose one of {', '.join(FITTERS)}")
    c, y = np.asarray(compute, dtype=float), np.asarray(reward, dtype=float)
    if c.size and np.isfinite(c).all():
        keep = c <= cfg.fit_fraction * c.max()
        c, y = c[keep], y[keep]
    kwargs = dict(
        exclude_before=cfg.exclude_before, exclude_fraction=cfg.exclude_fraction, a_step=cfg.a_step,
        bootstrap=cfg.bootstrap, confidence=cfg.confidence, seed=cfg.seed, min_points=cfg.min_points,
    )
    if kind == "sigmoid":
        kwargs.update(n_cmid=cfg.n_cmid, r0=r0)
    kwargs.update(overrides)
    return FITTERS[kind](c, y, **kwargs)


def target_compute(cfg: ScalingConfig, max_compute: float) -> float:
    return float(cfg.target_compute) if cfg.target_compute > 0 else 4.0 * float(max_compute)


def fit_report(
    fit: CurveFit, compute: np.ndarray, reward: np.ndarray, target: float, prefix: str = "scaling/"
) -> dict[str, float]:
    """The fit's flat float dict plus the prediction at the target compute and the error on held-out points."""
    out = fit.to_dict(prefix)
    out[f"{prefix}target_compute"] = float(target)
    out[f"{prefix}pred_at_target"] = float(fit.predict(target))
    if fit.samples is not None and len(fit.samples):
        lo, hi = fit.band(np.array([target]))
        out[f"{prefix}pred_at_target_lo"], out[f"{prefix}pred_at_target_hi"] = float(lo[0]), float(hi[0])
    held = compute > fit.compute_max
    if held.any():
        out[f"{prefix}heldout_mae"] = float(np.mean(np.abs(fit.predict(compute[held]) - reward[held])))
        out[f"{prefix}heldout_points"] = float(held.sum())
    return out


def fit_run(run_dir: str | Path, cfg) -> dict[str, float]:
    """Fit the run's `cfg.metric` against `perf/compute/<cfg.compute>`; write scaling_fit.{json,png} into it.

    Returns {"scaling/A", "scaling/B", "scaling/C_mid" (sigmoid) or "scaling/D" (power), "scaling/R0",
    interval bounds "scaling/<p>_lo|_hi", "scaling/sse", "scaling/pred_at_target", ...}, all floats.
    Raises ValueError when there is nothing to fit (scaling.fit=none, too few points, flat curve, NaN).
    """
    cfg = as_config(cfg)
    if cfg.fit == "none":
        raise ValueError("scaling.fit is 'none': nothing to fit")
    run_dir = Path(run_dir)
    series = read_run(run_dir).series(cfg.metric, cfg.compute)
    compute, reward, r0 = pool([series])
    fit = fit_points(compute, reward, cfg, r0=r0)
    target = target_compute(cfg, series.compute.max())
    report = fit_report(fit, compute, reward, target)
    write_fit_json(run_dir / FIT_JSON, fit, cfg, series, report)
    save_curves(run_dir / FIT_PNG, [Curve(run_dir.name, compute, reward, fit)], cfg.compute, cfg.metric,
                target, title=fit_title(fit, cfg))
    return report


def fit_title(fit: CurveFit, cfg: ScalingConfig) -> str:
    params = ", ".join(f"{k}={v:.4g}" for k, v in fit.params.items())
    return f"{fit.kind} fit of {cfg.metric} vs {cfg.compute}: {params}"


def write_fit_json(path: Path, fit: CurveFit, cfg: ScalingConfig, series: Series, report: dict) -> None:
    doc = {
        "kind": fit.kind,
        "metric": cfg.metric,
        "compute": cfg.compute,
        "params": fit.params,
        "intervals": {k: list(v) for k, v in fit.intervals.items()},
        "confidence": fit.confidence,
        "report": report,
        "points": {"step": series.step.tolist(), "compute": series.compute.tolist(), "reward": series.reward.tolist()},
        "config": dataclasses.asdict(cfg),
    }
    path.write_text(json.dumps(doc, indent=2, allow_nan=True))
