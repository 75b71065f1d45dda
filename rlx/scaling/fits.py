"""Fit results: fitted parameters, bootstrap samples, prediction and an extrapolation band."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from rlx.scaling.curves import power_law, sigmoid


@dataclass
class CurveFit:
    """Shared behaviour; subclasses declare `kind`, `param_names` and `_curve`."""

    kind: ClassVar[str] = ""
    param_names: ClassVar[tuple[str, ...]] = ()

    def _curve(self, c, *params):  # pragma: no cover - abstract
        raise NotImplementedError

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
        return {
            "sse": self.sse,
            "rmse": float(np.sqrt(self.sse / max(self.n_points, 1))),
            "n_points": float(self.n_points),
            "fit_compute_min": self.compute_min,
            "fit_compute_max": self.compute_max,
        }


@dataclass
class SigmoidFit(CurveFit):
    """R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B) with R0 held fixed."""

    A: float
    B: float
    C_mid: float
    R0: float
    sse: float  # sum of squared residuals on the fitted points
    n_points: int  # evaluation points used (compute > 0, after the early window)
    compute_min: float  # fitted compute window
    compute_max: float
    A_fixed: bool = False  # A was given, not fitted (ScaleRL's comparison refit)
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)  # bootstrap percentile intervals
    samples: np.ndarray | None = None  # [n_boot, 3] bootstrap (A, B, C_mid)
    confidence: float = 0.95

    kind: ClassVar[str] = "sigmoid"
    param_names: ClassVar[tuple[str, ...]] = ("A", "B", "C_mid")

    def _curve(self, c, A, B, C_mid):
        return sigmoid(c, A, B, C_mid, self.R0)

    def stats(self) -> dict[str, float]:
        return {"R0": self.R0, **super().stats()}


@dataclass
class PowerFit(CurveFit):
    """R(C) = A - D / C^B."""

    A: float
    B: float
    D: float
    sse: float
    n_points: int
    compute_min: float
    compute_max: float
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)
    samples: np.ndarray | None = None  # [n_boot, 3] bootstrap (A, B, D)
    confidence: float = 0.95

    kind: ClassVar[str] = "power"
    param_names: ClassVar[tuple[str, ...]] = ("A", "B", "D")

    def _curve(self, c, A, B, D):
        return power_law(c, A, B, D)
