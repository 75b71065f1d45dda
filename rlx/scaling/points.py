"""Input checks shared by the fitters: finite values, enough points, a curve that actually moves."""

from __future__ import annotations

import numpy as np
from scipy.special import fdtrc  # F-distribution survival function (scipy.stats is slow to import)


def as_points(compute, reward) -> tuple[np.ndarray, np.ndarray]:
    """Validate and return (compute [N], reward [N]) as float arrays."""
    c = np.asarray(compute, dtype=float).reshape(-1)
    y = np.asarray(reward, dtype=float).reshape(-1)
    if c.shape != y.shape:
        raise ValueError(f"compute and reward differ in length ({c.size} vs {y.size})")
    if c.size == 0:
        raise ValueError("no evaluation points to fit")
    for name, v in (("compute", c), ("reward", y)):
        bad = ~np.isfinite(v)
        if bad.any():
            where = np.flatnonzero(bad)[:5].tolist()
            raise ValueError(f"{name} has {int(bad.sum())} NaN/inf value(s) (at positions {where})")
    if (c < 0).any():
        raise ValueError(f"compute must be >= 0, got min {c.min():g}")
    return c, y


def fit_window(
    c: np.ndarray, y: np.ndarray, exclude_before: float, exclude_fraction: float, min_points: int, n_params: int
) -> tuple[np.ndarray, np.ndarray, float]:
    """Points with compute > 0 and >= max(exclude_before, exclude_fraction * max compute)."""
    if not 0.0 <= exclude_fraction < 1.0:
        raise ValueError(f"exclude_fraction must be in [0, 1), got {exclude_fraction}")
    threshold = max(float(exclude_before), float(exclude_fraction) * float(c.max()))
    keep = (c > 0) & (c >= threshold)
    need = max(int(min_points), n_params + 1)
    if keep.sum() < need:
        raise ValueError(
            f"too few points: {int(keep.sum())} evaluation(s) with compute > 0 and >= {threshold:g} "
            f"(of {c.size}); need at least {need} to fit {n_params} parameters"
        )
    return c[keep], y[keep], threshold


def check_not_flat(y: np.ndarray, reference: float | None = None) -> None:
    """Every fitted reward (and the reference R0) equal: no curve to fit."""
    values = y if reference is None else np.append(y, reference)
    if np.ptp(values) <= 1e-12 * max(1.0, float(np.abs(values).max())):
        raise ValueError(f"flat curve: every reward equals {values[0]:g}; nothing to fit")


def check_trend(sse_fit: float, sse_null: float, n: int, n_params: int, n_null: int, alpha: float, what: str) -> None:
    """F-test of the fitted curve against a flat null model; raise if the curve explains nothing beyond noise."""
    if alpha <= 0:
        return
    dof = n - n_params
    if sse_fit <= 0.0 or dof <= 0:
        return  # exact fit (noise-free data) or no residual degrees of freedom: nothing to test
    f = ((sse_null - sse_fit) / (n_params - n_null)) / (sse_fit / dof)
    p = float(fdtrc(n_params - n_null, dof, f)) if f > 0 else 1.0
    if p > alpha:
        raise ValueError(
            f"flat curve: the reward does not move beyond noise ({what}; F-test p = {p:.3g} > {alpha:g}); "
            "its parameters would be meaningless"
        )
