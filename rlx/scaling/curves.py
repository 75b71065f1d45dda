"""The two curve families, as plain numpy functions that broadcast over parameters and compute."""

from __future__ import annotations

import numpy as np
from scipy.special import expit


def sigmoid(c, A, B, C_mid, R0):
    """ScaleRL: R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B); R(0) = R0.

    Written as R0 + (A - R0) * expit(B * log(C / C_mid)), which is exact and never overflows.
    """
    c = np.asarray(c, dtype=float)
    with np.errstate(divide="ignore"):
        log_ratio = np.log(c) - np.log(C_mid)  # -inf at C = 0, so expit -> 0 and R -> R0
    return R0 + (np.asarray(A) - R0) * expit(np.asarray(B) * log_ratio)


def power_law(c, A, B, D):
    """Power law: R(C) = A - D / C^B (the comparison family in ScaleRL); diverges at C = 0."""
    c = np.asarray(c, dtype=float)
    with np.errstate(divide="ignore"):
        return np.asarray(A) - np.asarray(D) * np.power(c, -np.asarray(B))
