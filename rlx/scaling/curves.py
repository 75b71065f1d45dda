"""Curves and fit results: the two families, the fitted-result types (prediction, bootstrap band), and the numerics
every fit shares: input checks, bootstrap weights and intervals, the batched Levenberg-Marquardt polish."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, ClassVar

import numpy as np
from scipy.special import expit, fdtrc  # fdtrc: F-distribution survival function (scipy.stats is slow to import)


def sigmoid(c, A, B, C_mid, R0):
    """ScaleRL: R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B), as R0 + (A - R0) * expit(B log(C / C_mid)): no overflow."""
    c = np.asarray(c, dtype=float)
    with np.errstate(divide="ignore"):
        log_ratio = np.log(c) - np.log(C_mid)  # -inf at C = 0, so expit -> 0 and R -> R0
    return R0 + (np.asarray(A) - R0) * expit(np.asarray(B) * log_ratio)


def power_law(c, A, B, D):
    """Power law: R(C) = A - D / C^B (the comparison family in ScaleRL); diverges at C = 0."""
    c = np.asarray(c, dtype=float)
    with np.errstate(divide="ignore"):
        return np.asarray(A) - np.asarray(D) * np.power(c, -np.asarray(B))


@dataclass(kw_only=True)
class CurveFit:
    """What every fit holds; subclasses declare `kind`, `param_names`, their parameters and `_curve`."""

    kind: ClassVar[str] = ""
    param_names: ClassVar[tuple[str, ...]] = ()

    sse: float  # sum of squared residuals on the fitted points
    n_points: int  # evaluation points used (compute > 0, after the early window)
    compute_min: float  # fitted compute window
    compute_max: float
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)  # bootstrap percentile intervals
    samples: np.ndarray | None = None  # [n_boot, len(param_names)] bootstrap parameters
    confidence: float = 0.95
    a_bounds: tuple[float, float] = (0.0, 1.0)  # first and last value of the A grid

    def _curve(self, c, *params):  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def A_at_edge(self) -> bool:
        """A fitted (not fixed) and on the first or last value of its grid: the data do not pin the asymptote."""
        lo, hi = self.a_bounds
        return not getattr(self, "A_fixed", False) and not lo + 1e-9 < self.A < hi - 1e-9

    @property
    def params(self) -> dict[str, float]:
        return {k: float(getattr(self, k)) for k in self.param_names}

    def predict(self, c) -> np.ndarray:
        """Reward predicted at compute c (scalar or array)."""
        return self._curve(c, *(getattr(self, k) for k in self.param_names))

    def band(self, c, confidence: float | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Pointwise bootstrap band of the predicted reward at compute c: (lo, hi), each shaped like c."""
        if self.samples is None or len(self.samples) == 0:
            raise ValueError("this fit has no bootstrap samples (bootstrap=0): no band")
        conf = self.confidence if confidence is None else confidence
        c = np.asarray(c, dtype=float)
        cols = [self.samples[:, i].reshape((-1,) + (1,) * c.ndim) for i in range(len(self.param_names))]
        curves = self._curve(c[None], *cols)  # [n_boot, *c.shape]
        lo, hi = np.nanquantile(curves, [(1 - conf) / 2, 1 - (1 - conf) / 2], axis=0)
        return lo, hi

    def to_dict(self, prefix: str = "") -> dict[str, float]:
        """Flat float dict: parameters, their interval bounds (`<p>_lo`, `<p>_hi`) and fit statistics."""
        out = {f"{prefix}{k}": v for k, v in self.params.items()}
        for k, (lo, hi) in self.intervals.items():
            out[f"{prefix}{k}_lo"], out[f"{prefix}{k}_hi"] = float(lo), float(hi)
        out.update({f"{prefix}{k}": float(v) for k, v in self.stats().items()})
        return out

    def stats(self) -> dict[str, float]:
        return {"sse": self.sse, "rmse": float(np.sqrt(self.sse / max(self.n_points, 1))),
                "n_points": float(self.n_points), "fit_compute_min": self.compute_min,
                "fit_compute_max": self.compute_max}


@dataclass(kw_only=True)
class SigmoidFit(CurveFit):
    """R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B) with R0 held fixed."""

    A: float
    B: float
    C_mid: float
    R0: float
    A_fixed: bool = False  # A was given, not fitted (ScaleRL's comparison refit)

    kind: ClassVar[str] = "sigmoid"
    param_names: ClassVar[tuple[str, ...]] = ("A", "B", "C_mid")

    def _curve(self, c, A, B, C_mid):
        return sigmoid(c, A, B, C_mid, self.R0)

    def stats(self) -> dict[str, float]:
        return {"R0": self.R0, **super().stats()}


@dataclass(kw_only=True)
class PowerFit(CurveFit):
    """R(C) = A - D / C^B."""

    A: float
    B: float
    D: float

    kind: ClassVar[str] = "power"
    param_names: ClassVar[tuple[str, ...]] = ("A", "B", "D")

    def _curve(self, c, A, B, D):
        return power_law(c, A, B, D)


def resample_weights(n_points: int, n_boot: int, seed: int) -> np.ndarray:
    """[n_boot, n_points] counts of each point in a resample drawn with replacement (each row sums to n_points)."""
    rng = np.random.default_rng(seed)
    return rng.multinomial(n_points, np.full(n_points, 1.0 / n_points), size=n_boot).astype(float)


def percentile_intervals(samples: np.ndarray, names, confidence: float) -> dict[str, tuple[float, float]]:
    """Percentile interval of each column of samples [n_boot, len(names)]."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    lo, hi = np.quantile(samples, [(1 - confidence) / 2, 1 - (1 - confidence) / 2], axis=0)
    return {name: (float(lo[i]), float(hi[i])) for i, name in enumerate(names)}


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


def fit_window(c: np.ndarray, y: np.ndarray, exclude_before: float, exclude_fraction: float, min_points: int,
               n_params: int) -> tuple[np.ndarray, np.ndarray, float]:
    """Points with compute > 0 and >= max(exclude_before, exclude_fraction * max compute)."""
    if not 0.0 <= exclude_fraction < 1.0:
        raise ValueError(f"exclude_fraction must be in [0, 1), got {exclude_fraction}")
    threshold = max(float(exclude_before), float(exclude_fraction) * float(c.max()))
    keep = (c > 0) & (c >= threshold)
    need = max(int(min_points), n_params + 1)
    if keep.sum() < need:
        raise ValueError(f"too few points: {int(keep.sum())} evaluation(s) with compute > 0 and >= {threshold:g} "
                         f"(of {c.size}); need at least {need} to fit {n_params} parameters")
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
        raise ValueError(f"flat curve: the reward does not move beyond noise ({what}; F-test p = {p:.3g} > "
                         f"{alpha:g}); its parameters would be meaningless")


# model(theta [K, p]) -> (prediction [K, N], jacobian of the prediction [K, N, p])
Model = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]


def levenberg_marquardt(model: Model, theta: np.ndarray, y: np.ndarray, weights: np.ndarray, lo, hi, free,
                        iters: int = 100) -> tuple[np.ndarray, np.ndarray]:
    """Minimise sum_n weights[k, n] (y[n] - pred[k, n])^2 for each row k. Returns (theta [K, p], sse [K]).
    Parameters outside `free` (bool [p]) stay at their start; steps are clipped to [lo, hi] ([p] each)."""
    theta = np.array(theta, dtype=float)
    lo, hi, free = np.asarray(lo, float), np.asarray(hi, float), np.asarray(free, bool)
    pred, jac = model(theta)
    r = y[None] - pred  # [K, N]
    sse = np.sum(weights * r * r, axis=1)  # [K]
    lam = np.full(theta.shape[0], 1e-3)
    eye = np.eye(int(free.sum()))
    for _ in range(iters):
        j = jac[:, :, free]  # [K, N, p_free]
        jtj = np.einsum("kn,kni,knj->kij", weights, j, j)  # [K, p, p]
        grad = np.einsum("kn,kni,kn->ki", weights, j, r)  # [K, p]
        diag = np.diagonal(jtj, axis1=1, axis2=2)  # [K, p]
        damp = lam[:, None] * np.maximum(diag, 1e-12 * diag.max(axis=1, keepdims=True) + 1e-300)
        try:
            step = np.linalg.solve(jtj + damp[:, :, None] * eye, grad[:, :, None])[:, :, 0]
        except np.linalg.LinAlgError:  # a parameter the data cannot move (zero Jacobian column): least-norm step
            step = (np.linalg.pinv(jtj + damp[:, :, None] * eye) @ grad[:, :, None])[:, :, 0]
        new = theta.copy()
        new[:, free] += step
        new = np.clip(new, lo, hi)
        pred_new, jac_new = model(new)
        r_new = y[None] - pred_new
        sse_new = np.sum(weights * r_new * r_new, axis=1)
        ok = sse_new < sse  # [K]
        converged = np.where(ok, sse - sse_new <= 1e-10 * sse, lam > 1e8)
        theta[ok], sse[ok], r[ok], jac[ok] = new[ok], sse_new[ok], r_new[ok], jac_new[ok]
        lam = np.where(ok, lam / 3, lam * 4)
        if np.all(converged):
            break
    return theta, sse


def polish_keep_a_on_grid(model: Model, theta0: np.ndarray, y: np.ndarray, weights: np.ndarray, lo, hi,
                          a_grid: tuple[float, float, float], a_fixed: bool) -> np.ndarray:
    """Polish grid winners theta0 [K, p] (A first) keeping A on the grid (a_lo, a_hi, a_step): A fitted freely finds
    the valley floor, then the rest is refitted at A's grid neighbours and at the start (docs/scaling.md)."""
    free_all = np.ones(theta0.shape[1], bool)
    free_rest = free_all.copy()
    free_rest[0] = False
    if a_fixed:
        return levenberg_marquardt(model, theta0, y, weights, lo, hi, free_rest)[0]
    a_lo, a_hi, a_step = a_grid
    theta_c, _ = levenberg_marquardt(model, theta0, y, weights, lo, hi, free_all)
    below = np.clip(a_lo + np.floor((theta_c[:, 0] - a_lo) / a_step + 1e-9) * a_step, a_lo, a_hi)
    starts = []
    for a in (below, np.clip(below + a_step, a_lo, a_hi)):
        t = theta_c.copy()
        t[:, 0] = np.round(a, 10)
        starts.append(t)
    starts.append(theta0)
    results = [levenberg_marquardt(model, t, y, weights, lo, hi, free_rest) for t in starts]
    sse = np.stack([s for _, s in results])  # [3, K]
    pick = np.argmin(sse, axis=0)  # [K]
    return np.stack([t for t, _ in results])[pick, np.arange(theta0.shape[0])]
