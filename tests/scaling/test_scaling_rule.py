"""ScaleRL's comparison rule: |dA| > 0.02 -> higher A wins; else refit both at the mean A and compare B."""

from __future__ import annotations

import numpy as np
import pytest

from rlx.scaling import fit_sigmoid, scalerl_rule

C = np.linspace(0.0, 100_000.0, 101)
KW = dict(exclude_before=1_500.0, bootstrap=50)


def test_asymptotes_apart_decide_by_A(noisy):
    a = ("scout", C, noisy(C, 0.710, 1.65, 4242, seed=0))  # Table 1: Scout vs ScaleRL
    b = ("scalerl", C, noisy(C, 0.610, 1.92, 2542, seed=1))
    v = scalerl_rule(a, b, **KW)
    assert v.rule == "asymptote" and v.winner == "scout" and v.separable
    assert v.B_first is None
    assert scalerl_rule(b, a, **KW).winner == "scout"


def test_close_asymptotes_are_refit_at_their_mean_and_decided_by_B(noisy):
    a = ("steep", C, noisy(C, 0.610, 2.40, 2542, seed=2))
    b = ("shallow", C, noisy(C, 0.615, 1.40, 2542, seed=3))
    v = scalerl_rule(a, b, **KW)
    fa, fb = fit_sigmoid(*a[1:], **KW), fit_sigmoid(*b[1:], **KW)
    assert abs(fa.A - fb.A) <= 0.02
    assert v.rule == "efficiency"
    assert v.A_common == pytest.approx((fa.A + fb.A) / 2)
    assert v.winner == "steep"
    assert v.B_first == pytest.approx(2.40, rel=0.1) and v.B_second == pytest.approx(1.40, rel=0.1)
    assert v.separable  # B intervals apart
    assert "refit at A" in v.describe()
    assert scalerl_rule(b, a, **KW).winner == "steep"


def test_margin_is_configurable(noisy):
    a = ("a", C, noisy(C, 0.64, 1.9, 2542, seed=4))
    b = ("b", C, noisy(C, 0.61, 1.9, 2542, seed=5))
    assert scalerl_rule(a, b, margin=0.02, **KW).rule == "asymptote"
    assert scalerl_rule(a, b, margin=0.05, **KW).rule == "efficiency"


def test_bit_identical_recipes_tie_whatever_their_order(noisy):
    reward = noisy(C, 0.610, 1.92, 2542, seed=6)
    a, b = ("first", C, reward), ("second", C, reward.copy())
    for x, y in ((a, b), (b, a)):
        v = scalerl_rule(x, y, **KW)
        assert v.rule == "efficiency" and v.B_first == v.B_second
        assert v.winner is None  # before: the first recipe was awarded the win on B >= B
        assert "**tie** (equal B)" in v.describe() and "more efficient" not in v.describe()


def test_an_asymptote_at_the_grid_edge_leaves_the_pair_undetermined(noisy):
    # still climbing steeply at the last point: the least-squares A runs into the top of the grid (1.0)
    rising = ("rising", C, noisy(C, 3.0, 1.0, 1e6, noise=0.002, seed=7))
    settled = ("settled", C, noisy(C, 0.610, 1.92, 2542, seed=8))
    fit = fit_sigmoid(*rising[1:], **KW)
    assert fit.A == 1.0 and fit.A_at_edge
    assert not fit_sigmoid(*settled[1:], **KW).A_at_edge
    v = scalerl_rule(rising, settled, **KW)
    assert v.rule == "undetermined" and v.winner is None and v.at_edge == ("rising",)
    assert "**undetermined**: A of rising at the edge of its grid" in v.describe()
    # a refit at a fixed A is never "at the edge": the edge concerns fitted asymptotes only
    assert not fit_sigmoid(*settled[1:], A=1.0, **KW).A_at_edge


def test_a_curve_that_leaves_lm_singular_is_still_fitted():
    """val/pq/acc against flops of a real 60-step run (issue 18's two-eval-set measurement, 200 bootstrap
    resamples): a parameter the points cannot move made numpy's solve raise 'Singular matrix' inside
    Levenberg-Marquardt, and the fit failed with that message."""
    import numpy as np

    from rlx.scaling.config import ScalingConfig
    from rlx.scaling.fitting import fit_points

    flops = [0, 10578168832, 20648633344, 29960527872, 38292851712, 46039822336, 53804711936, 61456114688,
             69143355392, 77099380736, 84935946240, 92599294976, 100328346624, 108409804800, 116586830848,
             125098344448]
    acc = [0.02, 0.08, 0.12, 0.14, 0.09, 0.12, 0.11, 0.12, 0.16, 0.1, 0.14, 0.13, 0.08, 0.07, 0.06, 0.09]
    fit = fit_points(flops, acc, ScalingConfig(fit="sigmoid", bootstrap=200))
    assert 0.02 < fit.A <= 0.2 and np.isfinite(fit.B)
