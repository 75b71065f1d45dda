"""Power-law fit R = A - D / C^B: recovery, agreement with scipy, errors."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import least_squares

from rlx.scaling import fit_power, power_law

C = np.linspace(0.0, 100_000.0, 101)
A, B, D = 0.7, 0.5, 50.0


def test_noise_free_power_law_is_recovered():
    reward = power_law(np.maximum(C, 1.0), A, B, D)
    fit = fit_power(C, reward, bootstrap=0)
    assert fit.n_points == 100  # the zero-compute point is left out (the power law diverges there)
    assert fit.A == pytest.approx(A, abs=1e-9)
    assert fit.B == pytest.approx(B, rel=1e-4)
    assert fit.D == pytest.approx(D, rel=1e-3)


@pytest.mark.parametrize("seed", range(3))
def test_noisy_fit_is_as_good_as_scipy_with_A_on_the_grid(seed):
    rng = np.random.default_rng(seed)
    c = C[C >= 1500]
    y = power_law(c, A, B, D) + rng.normal(0, 0.01, c.size)
    res = lambda p, a=None: ((p[0] if a is None else a) - p[-1] * c ** -p[-2]) - y  # noqa: E731
    cont = least_squares(res, [A, B, D]).x
    ref = min(
        float(np.sum(least_squares(lambda p: res(p, a), cont[1:]).fun ** 2))
        for a in (np.floor(cont[0] / 0.005) * 0.005, np.ceil(cont[0] / 0.005) * 0.005)
    )
    fit = fit_power(c, y, bootstrap=50, seed=seed)
    assert fit.sse <= ref * (1 + 1e-7)
    assert abs(fit.A - A) <= 0.03
    lo, hi = fit.intervals["B"]
    assert lo <= fit.B <= hi
    assert fit.samples.shape == (50, 3)


def test_power_fit_errors():
    with pytest.raises(ValueError, match="too few points"):
        fit_power([0, 1, 2, 3], [0.1, 0.2, 0.3, 0.4])
    with pytest.raises(ValueError, match="flat curve"):
        fit_power(C, np.full(C.size, 0.4))
    with pytest.raises(ValueError, match="NaN"):
        fit_power([1, 2, 3, 4, 5], [0.1, 0.2, np.nan, 0.4, 0.5])
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="F-test"):
        fit_power(C, 0.4 + rng.normal(0, 0.01, C.size), bootstrap=0)
