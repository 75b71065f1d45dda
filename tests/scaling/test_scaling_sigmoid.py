"""ScaleRL sigmoid fit: Table 1 recovery and extrapolation, the paper's literal procedure, intervals, errors."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy.optimize import curve_fit, least_squares
from scipy.special import expit

from rlx.scaling import fit_sigmoid, sigmoid

TABLE1 = {  # ScaleRL Table 1 (A, B, C_mid): ScaleRL (8B) and ScaleRL-32k
    "scalerl": (0.610, 1.92, 2542.0),
    "scalerl_32k": (0.645, 1.89, 11272.0),
}
R0 = 0.2  # our choice: the reward at zero compute (the fixture's default)
FULL = np.linspace(0.0, 100_000.0, 101)  # GPU-hours: an evaluation every 1k GPU-hours up to 100k
HALF = FULL <= 50_000.0  # ScaleRL extrapolates from half the budget
EARLY = 1_500.0  # ScaleRL leaves out points before ~1.5k GPU-hours


@pytest.mark.parametrize("recipe", sorted(TABLE1))
@pytest.mark.parametrize("seed", range(5))
def test_table1_curve_fitted_on_half_budget_predicts_full_budget(recipe, seed, noisy):
    A, B, C_mid = TABLE1[recipe]
    reward = noisy(FULL, A, B, C_mid, noise=0.01, seed=seed)
    fit = fit_sigmoid(FULL[HALF], reward[HALF], exclude_before=EARLY, bootstrap=0)
    assert fit.R0 == R0  # fixed at the zero-compute evaluation
    assert abs(fit.A - A) <= 0.02 + 1e-9  # A sits on a 0.005 grid
    truth_at_full = sigmoid(FULL[-1], A, B, C_mid, R0)
    assert abs(float(fit.predict(FULL[-1])) - truth_at_full) <= 0.02


def test_noise_free_curve_is_recovered_exactly(noisy):
    A, B, C_mid = TABLE1["scalerl"]
    reward = noisy(FULL, A, B, C_mid, noise=0.0)
    fit = fit_sigmoid(FULL, reward, bootstrap=0)
    assert fit.A == pytest.approx(A, abs=1e-9)  # 0.610 is on the grid
    assert fit.B == pytest.approx(B, rel=1e-4)
    assert fit.C_mid == pytest.approx(C_mid, rel=1e-4)
    assert fit.sse < 1e-10


def test_grid_search_matches_the_papers_literal_procedure(noisy):
    """polish=False is ScaleRL's procedure: grid A x grid C_mid, B by scipy curve_fit per cell, least error."""
    A, B, C_mid = TABLE1["scalerl_32k"]
    reward = noisy(FULL, A, B, C_mid, seed=1)
    c, y = FULL[FULL >= EARLY], reward[FULL >= EARLY]
    a_grid, cmid_grid = np.round(np.arange(0.58, 0.72 + 1e-9, 0.01), 10), np.geomspace(3_000, 40_000, 10)
    best = (np.inf, None, None, None)
    for a in a_grid:  # the literal loop (slow, so on a small grid)
        for cm in cmid_grid:
            model = lambda x, b: R0 + (a - R0) * expit(b * np.log(x / cm))  # noqa: E731
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                (b,), _ = curve_fit(model, c, y, p0=[1.0], bounds=(1e-4, 1e4))
            sse = float(np.sum((y - model(c, b)) ** 2))
            if sse < best[0]:
                best = (sse, a, b, cm)
    fit = fit_sigmoid(FULL, reward, exclude_before=EARLY, a_step=0.01, a_range=(0.58, 0.72), n_cmid=10,
                      cmid_range=(3_000, 40_000), polish=False, bootstrap=0)
    assert fit.A == pytest.approx(best[1])
    assert fit.C_mid == pytest.approx(best[3], rel=1e-9)
    assert fit.B == pytest.approx(best[2], rel=1e-4)
    assert fit.sse == pytest.approx(best[0], rel=1e-6)


def test_polished_fit_is_as_good_as_scipy_with_A_on_the_grid(noisy):
    """Reference: scipy least_squares over (A, B, C_mid), then (B, C_mid) refitted at A's two grid neighbours."""
    A, B, C_mid = TABLE1["scalerl_32k"]
    for seed in range(3):
        reward = noisy(FULL, A, B, C_mid, seed=seed)
        c, y = FULL[HALF & (FULL >= EARLY)], reward[HALF & (FULL >= EARLY)]
        res = lambda p, a=None: R0 + ((p[0] if a is None else a) - R0) * expit(p[-2] * (np.log(c) - p[-1])) - y  # noqa: E731
        cont = least_squares(res, [A, B, np.log(C_mid)]).x
        ref_sse = np.inf
        for a in (np.floor(cont[0] / 0.005) * 0.005, np.ceil(cont[0] / 0.005) * 0.005):
            sol = least_squares(lambda p: res(p, a), cont[1:])
            ref_sse = min(ref_sse, float(np.sum(sol.fun**2)))
        fit = fit_sigmoid(FULL[HALF], reward[HALF], exclude_before=EARLY, bootstrap=0)
        assert fit.sse <= ref_sse * (1 + 1e-7)
        assert fit.sse >= float(np.sum(res(cont) ** 2)) * (1 - 1e-9)  # A on the grid cannot beat continuous A


def test_bootstrap_intervals_cover_the_truth_and_the_band_widens_beyond_the_data(noisy):
    A, B, C_mid = TABLE1["scalerl"]
    covered = {"A": 0, "B": 0, "C_mid": 0}
    for seed in range(8):
        reward = noisy(FULL, A, B, C_mid, seed=seed)
        fit = fit_sigmoid(FULL[HALF], reward[HALF], exclude_before=EARLY, bootstrap=100, seed=seed)
        assert fit.samples.shape == (100, 3)
        for name, truth in zip(("A", "B", "C_mid"), (A, B, C_mid)):
            lo, hi = fit.intervals[name]
            assert lo - 1e-9 <= fit.params[name] <= hi + 1e-9
            covered[name] += lo - 1e-9 <= truth <= hi + 1e-9
    assert all(n >= 6 for n in covered.values()), covered  # nominal 95%: 8/8 expected, 6/8 tolerated
    lo, hi = fit.band(np.array([10_000.0, 50_000.0, 400_000.0]))
    assert np.all(lo <= fit.predict(np.array([10_000.0, 50_000.0, 400_000.0])) + 1e-9)
    assert hi[2] - lo[2] > hi[1] - lo[1]


def test_fixed_A_refit_keeps_A_and_recovers_B(noisy):
    A, B, C_mid = TABLE1["scalerl"]
    reward = noisy(FULL, A, B, C_mid, seed=3)
    fit = fit_sigmoid(FULL, reward, exclude_before=EARLY, A=A, bootstrap=50)
    assert fit.A == A and fit.A_fixed
    assert np.all(fit.samples[:, 0] == A)
    assert fit.B == pytest.approx(B, rel=0.1)
    assert fit.C_mid == pytest.approx(C_mid, rel=0.1)


def test_R0_is_the_mean_of_zero_compute_evaluations_when_runs_are_pooled(noisy):
    A, B, C_mid = TABLE1["scalerl"]
    c = np.concatenate([FULL, FULL])
    y = np.concatenate([noisy(FULL, A, B, C_mid, r0=0.18, seed=0), noisy(FULL, A, B, C_mid, r0=0.22, seed=1)])
    assert fit_sigmoid(c, y, bootstrap=0).R0 == pytest.approx(0.20)
    assert fit_sigmoid(c, y, r0=0.3, bootstrap=0).R0 == 0.3


@pytest.mark.parametrize(
    "compute, reward, match",
    [
        ([0, 1, 2, 3], [0.2, 0.3, 0.4, 0.5], "too few points"),
        ([0, 1, 2, 3, 4, 5], [0.2, 0.3, np.nan, 0.5, 0.5, 0.6], "NaN"),
        ([0, 1, 2, np.inf, 4, 5], [0.2, 0.3, 0.4, 0.5, 0.5, 0.6], "NaN/inf"),
        ([0, 1, 2, 3, 4, 5], [0.3] * 6, "flat curve"),
        ([1, 2, 3, 4, 5, 6], [0.2, 0.3, 0.4, 0.5, 0.5, 0.6], "zero compute"),
        ([0, -1, 2, 3, 4, 5], [0.2, 0.3, 0.4, 0.5, 0.5, 0.6], "compute must be >= 0"),
        ([0, 1, 2], [0.2, 0.3], "differ in length"),
    ],
)
def test_bad_input_raises_a_clear_error(compute, reward, match):
    with pytest.raises(ValueError, match=match):
        fit_sigmoid(compute, reward, bootstrap=0)


def test_pure_noise_around_R0_is_flat():
    rng = np.random.default_rng(0)
    reward = R0 + rng.normal(0, 0.01, FULL.size)
    reward[0] = R0
    with pytest.raises(ValueError, match="flat curve.*F-test"):
        fit_sigmoid(FULL, reward, bootstrap=0)


def test_early_window_leaves_too_few_points(noisy):
    reward = noisy(FULL, *TABLE1["scalerl"])
    with pytest.raises(ValueError, match="too few points"):
        fit_sigmoid(FULL, reward, exclude_fraction=0.98, bootstrap=0)
    fit = fit_sigmoid(FULL, reward, exclude_before=20_000, bootstrap=0)
    assert fit.compute_min == 20_000 and fit.n_points == 81
