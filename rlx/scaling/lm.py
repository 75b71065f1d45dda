"""Batched Levenberg-Marquardt: K independent weighted least-squares fits (one per bootstrap resample) at once.

Used to polish grid winners off the grid's resolution. A (parameter 0) stays on ScaleRL's grid:
`polish_keep_a_on_grid` fits A continuously to find the valley floor (A and the curve's location
trade off strongly, so a coarse grid alone can pick the wrong A), then refits the other parameters
with A fixed at each grid neighbour of that continuous A and at the starting A, and keeps the best.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

# model(theta [K, p]) -> (prediction [K, N], jacobian of the prediction [K, N, p])
Model = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]


def levenberg_marquardt(
    model: Model, theta: np.ndarray, y: np.ndarray, weights: np.ndarray, lo, hi, free, iters: int = 100
) -> tuple[np.ndarray, np.ndarray]:
    """Minimise sum_n weights[k, n] (y[n] - pred[k, n])^2 for each row k. Returns (theta [K, p], sse [K]).

    Parameters outside `free` (bool [p]) stay at their start; steps are clipped to [lo, hi] ([p] each).
    """
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
        step = np.linalg.solve(jtj + damp[:, :, None] * eye, grad[:, :, None])[:, :, 0]
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


def polish_keep_a_on_grid(
    model: Model, theta0: np.ndarray, y: np.ndarray, weights: np.ndarray, lo, hi, a_grid: tuple[float, float, float],
    a_fixed: bool,
) -> np.ndarray:
    """Polish grid winners theta0 [K, p] (A first) keeping A on the grid (a_lo, a_hi, a_step). Returns [K, p]."""
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
