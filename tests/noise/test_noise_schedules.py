"""Schedule values pinned by hand-computed numbers (defaults: K=10, 1e-2 -> 5e-4, T=100)."""

from __future__ import annotations

import math

import pytest

from tests.noise.noise_helpers import aqn_config
from rlx.noise import sigma_at, stage_of, stage_table

T = 100


def test_exponential_defaults_by_hand():
    cfg = aqn_config()  # exponential, 1e-2 -> 5e-4, K = 10
    # intervals of 10 steps; stage 0 (steps 0..9) is noise-free
    assert sigma_at(0, T, cfg) == (0.0, 0)
    assert sigma_at(9, T, cfg) == (0.0, 0)
    # stage 1 starts the decay at sigma_start exactly
    assert sigma_at(10, T, cfg) == (1e-2, 1)
    assert sigma_at(19, T, cfg) == (1e-2, 1)
    # stage 2: ratio per stage 0.05 ** (1/8) = exp(ln(0.05)/8) = exp(-0.374467) = 0.687656
    sigma, stage = sigma_at(20, T, cfg)
    assert stage == 2 and sigma == pytest.approx(6.87656e-3, rel=1e-5)
    # step 55 is stage 5: 1e-2 * 0.05 ** (4/8) = 1e-2 * sqrt(0.05) = 2.2360680e-3
    sigma, stage = sigma_at(55, T, cfg)
    assert stage == 5 and sigma == pytest.approx(2.2360680e-3, rel=1e-7)
    # last stage ends at sigma_end exactly
    assert sigma_at(90, T, cfg) == (5e-4, 9)
    assert sigma_at(99, T, cfg) == (5e-4, 9)


def test_exponential_is_geometric_across_stages():
    cfg = aqn_config()
    sigmas = [sigma_at(10 * k, T, cfg)[0] for k in range(1, 10)]
    ratios = [b / a for a, b in zip(sigmas, sigmas[1:])]
    assert ratios == pytest.approx([0.05 ** (1 / 8)] * 8, rel=1e-12)


def test_linear_by_hand():
    cfg = aqn_config(schedule="linear")
    assert sigma_at(5, T, cfg) == (0.0, 0)
    assert sigma_at(10, T, cfg) == (1e-2, 1)
    # stage 3: 1e-2 - 9.5e-3 * 2/8 = 7.625e-3; stage 5: 1e-2 - 9.5e-3 * 4/8 = 5.25e-3
    assert sigma_at(30, T, cfg)[0] == pytest.approx(7.625e-3, rel=1e-12)
    assert sigma_at(55, T, cfg)[0] == pytest.approx(5.25e-3, rel=1e-12)
    assert sigma_at(99, T, cfg) == (5e-4, 9)


def test_cosine_by_hand():
    cfg = aqn_config(schedule="cosine")
    assert sigma_at(0, T, cfg) == (0.0, 0)
    assert sigma_at(10, T, cfg) == (1e-2, 1)
    # stage 3: t = 2/8, (1 + cos(pi/4))/2 = 0.8535534; 5e-4 + 9.5e-3 * 0.8535534 = 8.6087572e-3
    assert sigma_at(35, T, cfg)[0] == pytest.approx(8.6087572e-3, rel=1e-7)
    # stage 5: t = 1/2, cosine factor 1/2 -> the midpoint 5.25e-3
    assert sigma_at(55, T, cfg)[0] == pytest.approx(5.25e-3, rel=1e-12)
    assert sigma_at(99, T, cfg) == (5e-4, 9)


def test_constant_has_no_noise_free_stage():
    cfg = aqn_config(schedule="constant")
    assert sigma_at(0, T, cfg) == (1e-2, 0)
    assert sigma_at(55, T, cfg) == (1e-2, 5)
    assert sigma_at(99, T, cfg) == (1e-2, 9)


def test_uneven_split_uses_floor_of_step_times_k_over_t():
    # T = 25, K = 10: stage = floor(0.4 * step) -> stage 0 is steps 0..2, stage 1 is steps 3..4
    cfg = aqn_config()
    assert [stage_of(s, 25, 10) for s in range(6)] == [0, 0, 0, 1, 1, 2]
    assert sigma_at(2, 25, cfg) == (0.0, 0)
    assert sigma_at(3, 25, cfg) == (1e-2, 1)
    assert sigma_at(24, 25, cfg) == (5e-4, 9)
    rows = stage_table(25, cfg)
    assert [(r["first_step"], r["last_step"]) for r in rows][:3] == [(0, 2), (3, 4), (5, 7)]
    assert sum(r["last_step"] - r["first_step"] + 1 for r in rows) == 25


def test_steps_past_the_end_stay_in_the_last_stage():
    cfg = aqn_config()
    assert sigma_at(100, T, cfg) == (5e-4, 9)
    assert sigma_at(250, T, cfg) == (5e-4, 9)


def test_two_stages_use_sigma_start_after_the_noise_free_half():
    cfg = aqn_config(stages=2)
    assert sigma_at(49, T, cfg) == (0.0, 0)
    assert sigma_at(50, T, cfg) == (1e-2, 1)


@pytest.mark.parametrize(
    "overrides, total, step, message",
    [
        ({"schedule": "sqrt"}, T, 0, "unknown noise.schedule 'sqrt'"),
        ({"sigma_start": -1e-2}, T, 0, "noise.sigma_start must be"),
        ({"sigma_end": math.nan}, T, 0, "noise.sigma_end must be"),
        ({"sigma_end": 0.0}, T, 0, "needs sigma_start > 0 and sigma_end > 0"),
        ({"stages": 1}, T, 0, "noise.stages must be >= 2"),
        ({}, 0, 0, "total_steps must be >= 1"),
        ({}, T, -1, "step must be >= 0"),
    ],
)
def test_bad_input_is_named(overrides, total, step, message):
    with pytest.raises(ValueError, match=message):
        sigma_at(step, total, aqn_config(**overrides))


def test_linear_may_end_at_zero():
    cfg = aqn_config(schedule="linear", sigma_end=0.0)
    assert sigma_at(99, T, cfg) == (0.0, 9)
