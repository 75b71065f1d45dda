"""`python -m benchmarks.studies.testbed_probe`: the calibration probe of the mini testbeds, on a tiny base."""

from __future__ import annotations

import pytest

from tests.conftest import TINY

pytestmark = pytest.mark.integration


def test_probe_reports_rule_use_and_entropy_that_the_noise_moves():
    from benchmarks.studies.testbed_probe import probe

    out = probe([*TINY, "task=rules", "task.n_train=400", "task.n_eval=16", "model.sft.steps=30",
                 "rollout.group_size=4"], sigmas=[0.0, 0.0, 3.0], draws=2, prompts=6)
    assert out["prompts"] == 6 and out["group_size"] == 4
    for key in ("greedy_acc", "sampled_acc", "groups_with_a_pass", "greedy_applies_a_rule", "sampled_applies_a_rule"):
        assert 0.0 <= out[key] <= 1.0, key
    assert out["sampled_applies_a_rule"] >= out["sampled_acc"]  # a rewarded completion applies the key's rule
    clean, again, noisy = out["entropy_vs_sigma"]
    assert clean == again  # the same prompts and sampling streams at every sigma
    assert clean["entropy_sd"] > 0  # the draws differ (fresh sampling streams)
    assert noisy["entropy"] != clean["entropy"]  # the noise reaches the sampling policy
