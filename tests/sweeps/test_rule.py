"""rlx.sweeps.rule: the predictive decision rule by hand, and the synthetic acceptance through the real
fitting code (benchmarks.predictive)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from rlx.scaling.config import ScalingConfig
from rlx.scaling.curves import sigmoid
from rlx.sweeps.rule import ArmFit, classify, decide, fit_arm


def arm(A, lo, hi, status="determined"):
    fit = SimpleNamespace(A=A, B=2.0, C_mid=10.0, R0=0.1, intervals={"A": (lo, hi)})
    return ArmFit(status, fit)


def by_arm(decisions):
    return {d.arm: d for d in decisions}


# ---- (a) the rule by hand -------------------------------------------------------------------------

def test_clear_loser_stops_and_the_leader_runs_on():
    d = by_arm(decide(0, {"lead": arm(0.60, 0.58, 0.62), "low": arm(0.40, 0.38, 0.42)}, {"lead": 10, "low": 10}))
    assert d["lead"].decision == "continue" and "leader" in d["lead"].reason
    assert d["low"].decision == "stop" and d["low"].leader == "lead"
    assert (d["low"].A, d["low"].A_lo, d["low"].A_hi, d["low"].budget, d["low"].round) == (0.40, 0.38, 0.42, 10, 0)


def test_arm_within_the_margin_never_stops():
    # A_hi 0.565 + 0.02 = 0.585 >= leader's A_lo 0.58
    d = by_arm(decide(1, {"lead": arm(0.60, 0.58, 0.62), "near": arm(0.56, 0.55, 0.565)}, {"lead": 20, "near": 20}))
    assert d["near"].decision == "continue" and "can still win" in d["near"].reason
    # with a wider margin the same arm is within reach; with none it stops
    assert by_arm(decide(1, {"lead": arm(0.60, 0.58, 0.62), "near": arm(0.56, 0.55, 0.565)}, {"lead": 1, "near": 1},
                         margin=0.0))["near"].decision == "stop"


def test_undetermined_fits_never_stop_and_never_lead():
    fits = {"lead": arm(0.60, 0.58, 0.62), "edge": arm(0.05, 0.0, 0.06, "undetermined"),
            "nofit": ArmFit("undetermined", note="no fit: too few points")}
    d = by_arm(decide(0, fits, dict.fromkeys(fits, 10)))
    assert d["edge"].decision == d["nofit"].decision == "continue"
    assert "never stops" in d["edge"].reason
    # an undetermined arm with a higher A is not the leader
    d = by_arm(decide(0, {"lead": arm(0.60, 0.58, 0.62), "high": arm(0.95, 0.5, 1.0, "undetermined"),
                          "low": arm(0.3, 0.28, 0.32)}, dict.fromkeys(("lead", "high", "low"), 5)))
    assert d["low"].leader == "lead" and d["low"].decision == "stop"


def test_flat_twice_stops_flat_once_does_not():
    fits = {"lead": arm(0.60, 0.58, 0.62), "flat": ArmFit("flat", note="no fit: flat curve: ...")}
    once = by_arm(decide(0, fits, {"lead": 10, "flat": 10}, flat_rounds=2))
    assert once["flat"].decision == "continue" and once["flat"].flat_rounds == 1
    twice = by_arm(decide(1, fits, {"lead": 20, "flat": 20}, flat_before={"flat": once["flat"].flat_rounds},
                          flat_rounds=2))
    assert twice["flat"].decision == "stop" and twice["flat"].flat_rounds == 2
    # the default waits for a third flat round (docs/predictive.md: two stopped a slow starter)
    assert by_arm(decide(1, fits, {"lead": 20, "flat": 20}, flat_before={"flat": 1}))["flat"].decision == "continue"
    assert by_arm(decide(2, fits, {"lead": 40, "flat": 40}, flat_before={"flat": 2}))["flat"].decision == "stop"
    # a round that is not flat resets the count
    reset = by_arm(decide(1, {"lead": arm(0.60, 0.58, 0.62), "flat": arm(0.59, 0.55, 0.63)}, {"lead": 1, "flat": 1},
                          flat_before={"flat": 1}))
    assert reset["flat"].flat_rounds == 0


def test_a_round_never_stops_every_arm():
    fits = {"a": ArmFit("flat"), "b": ArmFit("flat")}
    d = decide(2, fits, {"a": 40, "b": 40}, flat_before={"a": 1, "b": 1}, flat_rounds=2)
    assert [x.decision for x in d] == ["continue", "continue"] and "never stops every arm" in d[0].reason


def test_refit_that_reaches_the_leader_keeps_the_arm():
    fits = {"lead": arm(0.60, 0.58, 0.62), "low": arm(0.40, 0.38, 0.42)}
    d = by_arm(decide(0, fits, {"lead": 1, "low": 1}, reach_p=lambda a, A: 0.5))
    assert d["low"].decision == "continue" and "fits about as well" in d["low"].reason
    assert by_arm(decide(0, fits, {"lead": 1, "low": 1}, reach_p=lambda a, A: 0.005))["low"].decision == "continue"
    d = by_arm(decide(0, fits, {"lead": 1, "low": 1}, reach_p=lambda a, A: 1e-6))
    assert d["low"].decision == "stop" and "rejected" in d["low"].reason


def test_classify_and_fit_arm_on_real_fits():
    cfg = ScalingConfig(fit="sigmoid", compute="steps", bootstrap=30)
    c = np.tile(np.arange(5.0, 85.0, 5.0), 2)
    rng = np.random.default_rng(0)
    ok = fit_arm(c, sigmoid(c, 0.6, 2.0, 20.0, 0.1) + rng.normal(0, 0.01, c.size), 0.1, cfg)
    assert ok.status == "determined" and abs(ok.A - 0.6) < 0.05
    assert classify(ok.fit, max_width=1e-6)[0] == "undetermined"  # interval too wide
    assert fit_arm(c, np.full(c.size, 0.1), 0.1, cfg).status == "flat"
    assert fit_arm(c[:2], c[:2] / 100, 0.0, cfg).status == "undetermined"  # too few points
    assert fit_arm(np.zeros(0), np.zeros(0), None, cfg).status == "undetermined"
    edge = SimpleNamespace(A=1.0, A_at_edge=True, a_bounds=(0.0, 1.0), intervals={"A": (0.9, 1.0)})
    assert classify(edge)[0] == "undetermined"


# ---- (b) the synthetic acceptance -----------------------------------------------------------------

def test_synthetic_arms_within_the_margin_are_never_stopped():
    from benchmarks.predictive import simulate

    fig = simulate(n_scenarios=15, bootstrap=50, seed=1)
    print(fig.summary())
    assert fig.near_best >= 15 and fig.false_stops == 0, fig.false_stop_cases
    assert fig.losers_stopped > 0 and 0.0 < fig.saved < 1.0
