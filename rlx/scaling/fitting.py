"""The fitters: ScaleRL's sigmoid and the power law, each an exact vectorised grid search polished off the grid
(docs/scaling.md, "How the fit works"), and `fit_points`, the one place that turns a ScalingConfig into a fit.
Sigmoid: for fixed (C_mid, B) the curve is R0 + a * S (S = expit(B log(C / C_mid)), a = A - R0), so the squared
error sum(d^2) - 2 a sum(d S) + a^2 sum(S^2) (d = reward - R0) is a quadratic whose best grid A is the grid value
nearest sum(d S) / sum(S^2). Every bootstrap resample is a weight vector over the points: one pass for all."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
from scipy.optimize import OptimizeWarning, curve_fit
from scipy.special import expit

from rlx.scaling.config import ScalingConfig, fitter_options
from rlx.scaling.curves import (
    CurveFit, PowerFit, SigmoidFit, as_points, check_not_flat, check_trend, fit_window, percentile_intervals,
    polish_keep_a_on_grid, resample_weights, sigmoid,
)


@dataclass(frozen=True)
class FitOptions:
    """The fitters' keyword options (ScalingConfig's fields say what they mean). n_b: log-grid values of B. polish:
    refine the grid winner, A kept on its grid. flat_alpha: the F-test level of a flat curve (0: no test)."""

    exclude_before: float = 0.0
    exclude_fraction: float = 0.0
    a_step: float = 0.005
    a_range: tuple[float, float] = (0.0, 1.0)
    n_b: int = 200
    polish: bool = True
    bootstrap: int = 200
    confidence: float = 0.95
    seed: int = 0
    min_points: int = 4
    flat_alpha: float = 0.01


_SIGMOID_CELLS_PER_CHUNK = 2_000_000  # elements of the [C_mid, B, N] basis held at once


def initial_reward(compute: np.ndarray, reward: np.ndarray) -> float:
    """R0: the mean reward of the evaluations at zero compute (one per run when seeds are pooled)."""
    at_zero = compute == 0
    if not at_zero.any():
        raise ValueError(f"no evaluation at zero compute to fix R0 (smallest compute is {compute.min():g}); "
                         f"pass r0= explicitly")
    return float(reward[at_zero].mean())


def fit_sigmoid(compute, reward, r0: float | None = None, *, A: float | None = None, n_cmid: int = 100,
                cmid_range: tuple[float, float] | None = None, b_range: tuple[float, float] = (0.1, 10.0),
                **options) -> SigmoidFit:
    """Fit R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B) to evaluations (compute [N], reward [N]) but zero compute.
    r0: default the mean reward at compute 0. A: the asymptote held fixed (ScaleRL's refit). cmid_range: default
    [min compute / 10, max compute * 100]. Other options: `FitOptions`. Bad input raises ValueError."""
    o = FitOptions(**options)
    c_all, y_all = as_points(compute, reward)
    R0 = initial_reward(c_all, y_all) if r0 is None else float(r0)
    if not np.isfinite(R0):
        raise ValueError(f"r0 must be finite, got {r0}")
    if o.a_step <= 0 or o.a_range[0] > o.a_range[1]:
        raise ValueError(f"bad A grid: step {o.a_step}, range {o.a_range}")
    if A is not None and not np.isfinite(A):
        raise ValueError(f"fixed A must be finite, got {A}")
    if n_cmid < 2 or o.n_b < 2 or not 0 < b_range[0] < b_range[1]:
        raise ValueError(f"bad grid: n_cmid={n_cmid}, n_b={o.n_b}, b_range={b_range}")
    n_params = 2 if A is not None else 3
    c, y, _ = fit_window(c_all, y_all, o.exclude_before, o.exclude_fraction, o.min_points, n_params)
    check_not_flat(y, R0)
    grid, a_top = _make_grid(c, A, o, n_cmid, cmid_range, b_range)
    logc, d = np.log(c), y - R0

    bounds = ([grid.a_lo, b_range[0] / 10.0, grid.log_cmid[0]], [grid.a_hi, b_range[1] * 10.0, grid.log_cmid[-1]])
    polish_rows = lambda theta, w: polish_keep_a_on_grid(  # noqa: E731
        _sigmoid_model(logc, R0), theta, y, w, *bounds, (grid.a_lo, grid.a_hi, grid.a_step), A is not None)
    ones = np.ones((1, c.size))
    theta = np.column_stack(grid.search(logc, d, R0, ones)[:3])  # [1, 3]: A, B, log C_mid
    if o.polish:
        theta = polish_rows(theta, ones)
    else:
        theta[0, 1] = _refine_b(logc, y, R0, *theta[0])
    a_best, b_best, lcm_best = (float(v) for v in theta[0])
    sse = float(np.sum((y - sigmoid(c, a_best, b_best, np.exp(lcm_best), R0)) ** 2))
    check_trend(sse, float(np.sum(d**2)), c.size, n_params, 0, o.flat_alpha, "vs a constant reward at R0")

    fit = SigmoidFit(A=a_best, B=b_best, C_mid=float(np.exp(lcm_best)), R0=R0, sse=sse, n_points=int(c.size),
                     compute_min=float(c.min()), compute_max=float(c.max()), A_fixed=A is not None,
                     confidence=o.confidence, a_bounds=(o.a_range[0], float(a_top)))
    if o.bootstrap > 0:
        weights = resample_weights(c.size, o.bootstrap, o.seed)  # [n_boot, N]
        start_grid = grid.coarsened() if o.polish else grid  # the polish refines the starts anyway
        thetas = np.column_stack(start_grid.search(logc, d, R0, weights)[:3])  # [n_boot, 3]
        if o.polish:
            thetas = polish_rows(thetas, weights)
        fit.samples = np.column_stack([thetas[:, 0], thetas[:, 1], np.exp(thetas[:, 2])])  # [n_boot, 3]
        fit.intervals = percentile_intervals(fit.samples, SigmoidFit.param_names, o.confidence)
    return fit


def _make_grid(c: np.ndarray, A, o: FitOptions, n_cmid: int, cmid_range, b_range) -> tuple[_Grid, float]:
    """The search grid over (A, B, log C_mid) for the fitted compute `c` [N], and A's last grid value."""
    lo, hi = cmid_range if cmid_range is not None else (c.min() / 10.0, c.max() * 100.0)
    if not 0 < lo < hi:
        raise ValueError(f"bad C_mid range ({lo}, {hi})")
    a_top = o.a_range[0] + np.floor((o.a_range[1] - o.a_range[0]) / o.a_step + 1e-9) * o.a_step  # last grid value
    a_lo, a_hi = (A, A) if A is not None else (o.a_range[0], a_top)
    grid = _Grid(log_cmid=np.linspace(np.log(lo), np.log(hi), n_cmid), b=np.geomspace(b_range[0], b_range[1], o.n_b),
                 a_lo=float(a_lo), a_hi=float(a_hi), a_step=o.a_step, a_fixed=A)
    return grid, float(a_top)


class _Grid:
    """The (A, C_mid, B) grid and its vectorised exhaustive search."""

    def __init__(self, log_cmid, b, a_lo, a_hi, a_step, a_fixed):
        self.log_cmid, self.b = log_cmid, b  # [M], [nB]
        self.a_lo, self.a_hi, self.a_step, self.a_fixed = a_lo, a_hi, a_step, a_fixed

    def coarsened(self, every_cmid: int = 2, every_b: int = 4) -> "_Grid":
        """The same ranges with fewer C_mid and B values (starting points for a polish)."""
        log_cmid = np.append(self.log_cmid[:-1:every_cmid], self.log_cmid[-1])
        return _Grid(log_cmid, self.b[::every_b], self.a_lo, self.a_hi, self.a_step, self.a_fixed)

    def snap_a(self, a_star: np.ndarray) -> np.ndarray:
        """Nearest grid value of A (the exact argmin of a quadratic over the grid); the fixed A if one is set."""
        if self.a_fixed is not None:
            return np.full_like(a_star, float(self.a_fixed))
        k = np.clip(np.rint((a_star - self.a_lo) / self.a_step), 0, round((self.a_hi - self.a_lo) / self.a_step))
        return self.a_lo + k * self.a_step

    def search(self, logc: np.ndarray, d: np.ndarray, r0: float, weights: np.ndarray):
        """Best (A, B, log C_mid, sse) for each weight row. logc, d: [N]; weights: [K, N]. Returns four [K] arrays."""
        n = logc.size
        k = weights.shape[0]
        d2 = weights @ (d * d)  # [K]
        wd = weights * d  # [K, N]
        best = np.full((4, k), np.inf)  # rows: sse, A, B, log C_mid
        m_chunk = max(1, _SIGMOID_CELLS_PER_CHUNK // (self.b.size * n))
        for i0 in range(0, self.log_cmid.size, m_chunk):
            lcm = self.log_cmid[i0 : i0 + m_chunk]  # [m]
            basis = expit(self.b[None, :, None] * (logc[None, None, :] - lcm[:, None, None]))  # [m, nB, N]
            basis = basis.reshape(-1, n)  # [m*nB, N]
            sd = wd @ basis.T  # [K, m*nB]
            ss = weights @ (basis * basis).T  # [K, m*nB]
            with np.errstate(divide="ignore", invalid="ignore"):
                a = self.snap_a(r0 + np.where(ss > 0, sd / ss, 0.0)) - r0  # [K, m*nB]
            sse = d2[:, None] - a * (2 * sd - a * ss)
            j = np.argmin(sse, axis=1)  # [K]
            rows = np.arange(k)
            better = sse[rows, j] < best[0]
            cm_idx, b_idx = np.divmod(j, self.b.size)
            cand = np.stack([sse[rows, j], a[rows, j] + r0, self.b[b_idx], lcm[cm_idx]])
            best[:, better] = cand[:, better]
        sse, a_best, b_best, lcm_best = best
        return np.round(a_best, 10), b_best, lcm_best, sse


def _sigmoid_model(logc: np.ndarray, r0: float):
    """theta [K, 3] = (A, B, log C_mid) -> (prediction [K, N], jacobian [K, N, 3])."""

    def model(theta):
        a, b, lcm = theta[:, 0:1], theta[:, 1:2], theta[:, 2:3]
        x = logc[None] - lcm  # [K, N]
        s = expit(b * x)
        ds = (a - r0) * s * (1 - s)
        return r0 + (a - r0) * s, np.stack([s, ds * x, -ds * b], axis=2)

    return model


def _refine_b(logc, y, r0, a, b0, lcm) -> float:
    """ScaleRL's step: B by scipy curve_fit at a fixed (A, C_mid) cell, started from the grid's B."""
    model = lambda lc, b: r0 + (a - r0) * expit(b * (lc - lcm))  # noqa: E731
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", OptimizeWarning)
            (b,), _ = curve_fit(model, logc, y, p0=[b0], bounds=(1e-4, 1e4))
    except (RuntimeError, ValueError):
        return float(b0)
    sse = lambda bb: float(np.sum((y - model(logc, bb)) ** 2))  # noqa: E731
    return float(b) if sse(b) <= sse(b0) else float(b0)


_POWER_CELLS_PER_CHUNK = 4_000_000  # elements of the [K, A, B] error cube held at once


def fit_power(compute, reward, *, b_range: tuple[float, float] = (0.01, 5.0), **options) -> PowerFit:
    """Fit R(C) = A - D / C^B to evaluations (compute [N], reward [N]) but zero compute; options as `fit_sigmoid`."""
    o = FitOptions(**options)
    c_all, y_all = as_points(compute, reward)
    if o.a_step <= 0 or o.a_range[0] > o.a_range[1] or o.n_b < 2 or not 0 < b_range[0] < b_range[1]:
        raise ValueError(f"bad grid: a_step={o.a_step}, a_range={o.a_range}, n_b={o.n_b}, b_range={b_range}")
    c, y, _ = fit_window(c_all, y_all, o.exclude_before, o.exclude_fraction, o.min_points, 3)
    check_not_flat(y)

    c_ref = float(c.max())
    x = np.log(c / c_ref)  # [N], <= 0
    a_hi = o.a_range[0] + np.floor((o.a_range[1] - o.a_range[0]) / o.a_step + 1e-9) * o.a_step
    a_grid = np.round(np.arange(o.a_range[0], a_hi + o.a_step / 2, o.a_step), 10)  # [nA]
    b_grid = np.geomspace(b_range[0], b_range[1], o.n_b)  # [nB]
    bounds = ([o.a_range[0], b_range[0] / 10.0, -np.inf], [a_hi, b_range[1] * 10.0, np.inf])
    polish_rows = lambda theta, w: polish_keep_a_on_grid(  # noqa: E731
        _power_model(x), theta, y, w, *bounds, (o.a_range[0], a_hi, o.a_step), False)

    ones = np.ones((1, c.size))
    theta = _power_grid_search(x, y, ones, a_grid, b_grid)  # [1, 3]: A, B, D'
    if o.polish:
        theta = polish_rows(theta, ones)
    a_best, b_best, dp_best = (float(v) for v in theta[0])
    sse = float(np.sum((y - (a_best - dp_best * np.exp(-b_best * x))) ** 2))
    check_trend(sse, float(np.sum((y - y.mean()) ** 2)), c.size, 3, 1, o.flat_alpha, "vs a constant reward")

    fit = PowerFit(A=a_best, B=b_best, D=dp_best * c_ref**b_best, sse=sse, n_points=int(c.size),
                   compute_min=float(c.min()), compute_max=c_ref, confidence=o.confidence,
                   a_bounds=(o.a_range[0], float(a_hi)))
    if o.bootstrap > 0:
        weights = resample_weights(c.size, o.bootstrap, o.seed)  # [n_boot, N]
        thetas = _power_grid_search(x, y, weights, a_grid, b_grid if not o.polish else b_grid[::4])
        if o.polish:
            thetas = polish_rows(thetas, weights)
        fit.samples = np.column_stack([thetas[:, 0], thetas[:, 1], thetas[:, 2] * c_ref ** thetas[:, 1]])
        fit.intervals = percentile_intervals(fit.samples, PowerFit.param_names, o.confidence)
    return fit


def _power_model(x: np.ndarray):
    """theta [K, 3] = (A, B, D') -> (prediction [K, N], jacobian [K, N, 3]) of A - D' exp(-B x)."""

    def model(theta):
        a, b, dp = theta[:, 0:1], theta[:, 1:2], theta[:, 2:3]
        e = np.exp(-b * x[None])  # [K, N]
        return a - dp * e, np.stack([np.ones_like(e), dp * x[None] * e, -e], axis=2)

    return model


def _power_grid_search(x, y, weights, a_grid, b_grid) -> np.ndarray:
    """Exhaustive (A, B) grid with D' in closed form, for each weight row. Returns theta [K, 3] = (A, B, D')."""
    u = np.exp(-b_grid[:, None] * x[None])  # [nB, N]
    s0, sy, syy = weights.sum(1), weights @ y, weights @ (y * y)  # [K]
    u1, uy, u2 = weights @ u.T, (weights * y) @ u.T, weights @ (u * u).T  # [K, nB]
    out = np.empty((weights.shape[0], 3))
    rows = max(1, _POWER_CELLS_PER_CHUNK // (a_grid.size * b_grid.size))
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


FITTERS = {"sigmoid": fit_sigmoid, "power": fit_power}  # scaling.fit -> fitter; "none" fits nothing


def fit_points(compute, reward, cfg: ScalingConfig, kind: str | None = None, r0: float | None = None,
               **overrides) -> CurveFit:
    """Fit evaluations with the config's options, holding out points beyond fit_fraction * max compute. r0: the
    sigmoid's R0 (default: from the zero-compute points); overrides: extra fitter arguments (A= for a refit)."""
    kind = kind or cfg.fit
    if kind not in FITTERS:
        raise ValueError(f"nothing to fit with scaling.fit={kind!r}; choose one of {', '.join(FITTERS)}")
    c, y = fitted_points(compute, reward, cfg)
    kwargs = fitter_options(cfg, kind)
    if kind == "sigmoid":
        kwargs["r0"] = r0
    kwargs.update(overrides)
    return FITTERS[kind](c, y, **kwargs)


def fitted_points(compute, reward, cfg: ScalingConfig) -> tuple[np.ndarray, np.ndarray]:
    """The points a fit sees: compute <= fit_fraction * max (the early window is cut by the fitter)."""
    c, y = np.asarray(compute, dtype=float), np.asarray(reward, dtype=float)
    if c.size and np.isfinite(c).all():
        keep = c <= cfg.fit_fraction * c.max()
        c, y = c[keep], y[keep]
    return c, y


def target_compute(cfg: ScalingConfig, max_compute: float) -> float:
    return float(cfg.target_compute) if cfg.target_compute > 0 else 4.0 * float(max_compute)
