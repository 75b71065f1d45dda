"""Bootstrap over evaluation points, expressed as multiplicity weights so that every resample is fitted at once."""

from __future__ import annotations

import numpy as np


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
