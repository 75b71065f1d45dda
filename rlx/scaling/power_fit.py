"""Power-law fit R(C) = A - D / C^B, ScaleRL's comparison family: the same grid-then-polish scheme as the sigmoid.

With x = log(C / c_ref) (c_ref: the largest fitted compute, to keep numbers O(1)) the curve is
A - D' exp(-B x) with D = D' c_ref^B. For fixed (A, B) it is linear in D', so D' and the squared
error are closed-form; A runs over a 0.005 grid and B over a fine log grid, all resamples at once.
"""

from __future__ import annotations

import numpy as np

from rlx.scaling.bootstrap import percentile_intervals, resample_weights
from rlx.scaling.fits import PowerFit
from rlx.scaling.lm import polish_keep_a_on_grid
from rlx.scaling.points import as_points, check_not_flat, check_trend, fit_window

_CELLS_PER_CHUNK = 4_000_000  # elements of the [K, A, B] error cube held at once


def fit_power(
    compute,
    reward,
    *,
    exclude_before: float = 0.0,
    exclude_fraction: float = 0.0,
    a_step: float = 0.005,
    a_range: tuple[float, float] = (0.0, 1.0),
    b_range: tuple[float, float] = (0.01, 5.0),
    n_b: int = 200,
    polish: bool = True,
    bootstrap: int = 200,
    confidence: float = 0.95,
    seed: int = 0,
    min_points: int = 4,
    flat_alpha: float = 0.01,
) -> PowerFit:
    """Fit R(C) = A - D / C^B to evaluations (compute [N], reward [N]); zero-compute points are left out.

    Options as in `fit_sigmoid`; flat_alpha tests against a constant reward (the mean).
    Raises ValueError on NaN/inf, too few points, a flat curve or a bad option.
    """
    c_all, y_all = as_points(compute, reward)
    if a_step <= 0 or a_range[0] > a_range[1] or n_b < 2 or not 0 < b_range[0] < b_range[1]:
        raise ValueError(f"bad grid: a_step={a_step}, a_range={a_range}, n_b={n_b}, b_range={b_range}")
    c, y, _ = fit_window(c_all, y_all, exclude_before, exclude_fraction, min_points, 3)
    check_not_flat(y)

    c_ref = float(c.max())
    x = np.log(c / c_ref)  # [N], <= 0
    a_hi = a_range[0] + np.floor((a_range[1] - a_range[0]) / a_step + 1e-9) * a_step
    a_grid = np.round(np.arange(a_range[0], a_hi + a_step / 2, a_step), 10)  # [nA]
    b_grid = np.geomspace(b_range[0], b_range[1], n_b)  # [nB]
    bounds = ([a_range[0], b_range[0] / 10.0, -np.inf], [a_hi, b_range[1] * 10.0, np.inf])
    polish_rows = lambda theta, w: polish_keep_a_on_grid(  # noqa: E731
        _model(x), theta, y, w, *bounds, (a_range[0], a_hi, a_step), False
    )

    ones = np.ones((1, c.size))
    theta = _grid_search(x, y, ones, a_grid, b_grid)  # [1, 3]: A, B, D'
    if polish:
        theta = polish_rows(theta, ones)
    a_best, b_best, dp_best = (float(v) for v in theta[0])
    sse = float(np.sum((y - (a_best - dp_best * np.exp(-b_best * x))) ** 2))
    check_trend(sse, float(np.sum((y - y.mean()) ** 2)), c.size, 3, 1, flat_alpha, "vs a constant reward")

    fit = PowerFit(
        A=a_best, B=b_best, D=dp_best * c_ref**b_best, sse=sse, n_points=int(c.size),
        compute_min=float(c.min()), compute_max=c_ref, confidence=confidence,
    )
    if bootstrap > 0:
        weights = resample_weights(c.size, bootstrap, seed)  # [n_boot, N]
        thetas = _grid_search(x, y, weights, a_grid, b_grid if not polish else b_grid[::4])
        if polish:
            thetas = polish_rows(thetas, weights)
        fit.samples = np.column_stack([thetas[:, 0], thetas[:, 1], thetas[:, 2] * c_ref ** thetas[:, 1]])
        fit.intervals = percentile_intervals(fit.samples, PowerFit.param_names, confidence)
    return fit


def _model(x: np.ndarray):
    """theta [K, 3] = (A, B, D') -> (prediction [K, N], jacobian [K, N, 3]) of A - D' exp(-B x)."""

    def model(theta):
        a, b, dp = theta[:, 0:1], theta[:, 1:2], theta[:, 2:3]
        e = np.exp(-b * x[None])  # [K, N]
        return a - dp * e, np.stack([np.ones_like(e), dp * x[None] * e, -e], axis=2)

    return model


def _grid_search(x, y, weights, a_grid, b_grid) -> np.ndarray:
    """Exhaustive (A, B) grid with D' in closed form, for each weight row. Returns theta [K, 3] = (A, B, D')."""
    u = np.exp(-b_grid[:, None] * x[None])  # [nB, N]
    s0, sy, syy = weights.sum(1), weights @ y, weights @ (y * y)  # [K]
    u1, uy, u2 = weights @ u.T, (weights * y) @ u.T, weights @ (u * u).T  # [K, nB]
    out = np.empty((weights.shape[0], 3))
    rows = max(1, _CELLS_PER_CHUNK // (a_grid.size * b_grid.size))
    for k0 in range(0, weights.shape[0], rows):
        sl = slice(k0, k0 + rows)
        a = a_grid[None, :, None]  # [1, nA, 1]
        num = a * u1[sl, None, :] - uy[sl, None, :]  # [k, nA, nB]: sum w (A - y) u
        base = a * a * s0[sl, None, None] - 2 * a * sy[sl, None, None] + syy[sl, None, None]  # sum w (A - y)^2
        sse = base - num * num / u2[sl, None, :]
        flat = np.argmin(sse.reshape(sse.shape[0], -1), axis=1)
        ia, ib = np.divmod(flat, b_grid.size)
        rows_k = np.arange(flat.size)
        out[sl] = np.column_stack([a_grid[ia], b_grid[ib], num[rows_k, ia, ib] / u2[sl][rows_k, ib]])
    return out
