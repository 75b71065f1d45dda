"""Batch shaping (overlong, zero variance, truncation), the pass-rate curriculum, config checks."""

from __future__ import annotations

import json

import pytest
import torch

from rlx.algo import (
    AlgoConfig,
    PassRateCurriculum,
    check_config,
    mask_truncated,
    overlong_penalty,
    zero_variance_groups,
)


def test_overlong_penalty_dapo_formula():
    """L_max 16, L_cache 4: 0 up to 12, then (12 - len) / 4 down to -1 at 16, and -1 beyond."""
    lengths = torch.tensor([1, 12, 13, 14, 15, 16, 20])
    penalty = overlong_penalty(lengths, AlgoConfig(overlong_cache=4), max_new_tokens=16)
    torch.testing.assert_close(penalty, torch.tensor([0.0, 0.0, -0.25, -0.5, -0.75, -1.0, -1.0]))


def test_overlong_max_len_overrides_max_new_tokens():
    penalty = overlong_penalty(torch.tensor([9, 10]), AlgoConfig(overlong_max_len=10, overlong_cache=2), 64)
    torch.testing.assert_close(penalty, torch.tensor([-0.5, -1.0]))


def test_overlong_rejects_cache_not_below_max():
    with pytest.raises(ValueError, match="L_cache"):
        overlong_penalty(torch.tensor([1]), AlgoConfig(overlong_cache=8), max_new_tokens=8)


def test_zero_variance_groups():
    rewards = torch.tensor([1.0, 0.5, 0.0, 1.0, 0.5, 1.0, 0.5])
    group = torch.tensor([7, 2, 9, 7, 2, 9, 2])  # interleaved: 7 -> [1, 1]; 2 -> [.5, .5, .5]; 9 -> [0, 1]
    assert zero_variance_groups(rewards, group).tolist() == [True, True, False, True, True, False, True]


def test_mask_truncated():
    mask = torch.ones(3, 2)
    out = mask_truncated(mask, torch.tensor([False, True, False]))
    assert out.tolist() == [[1.0, 1.0], [0.0, 0.0], [1.0, 1.0]]


def test_curriculum_retires_at_threshold_and_round_trips():
    cur = PassRateCurriculum(threshold=0.9)
    newly = cur.update(["a", "b", "c"], [0.9, 0.875, 0.0])
    assert newly == ["a"] and cur.is_retired("a") and not cur.is_retired("b")
    assert cur.update(["b", "a"], [1.0, 1.0]) == ["b"]  # "a" was already retired
    assert cur.retired == {"a", "b"} and len(cur) == 2
    restored = PassRateCurriculum(0.5)
    restored.load_state_dict(json.loads(json.dumps(cur.state_dict())))  # checkpoint-safe plain data
    assert restored.retired == {"a", "b"} and restored.threshold == 0.9
    assert restored.history["b"] == [0.875, 1.0]
    assert not restored.is_retired("c")


def test_curriculum_bad_input():
    with pytest.raises(ValueError, match="threshold"):
        PassRateCurriculum(0.0)
    cur = PassRateCurriculum()
    with pytest.raises(ValueError, match="pass rates"):
        cur.update(["a"], [0.5, 0.5])
    with pytest.raises(ValueError, match="pass rate"):
        cur.update(["a"], [1.5])


@pytest.mark.parametrize(
    "field,value",
    [("loss", "ppo"), ("aggregation", "seq"), ("adv_norm", "std"), ("eps_max", 0.0), ("beta", -1.0), ("mu", 0)],
)
def test_check_config_names_the_bad_field(field, value):
    with pytest.raises(ValueError, match=field):
        check_config(AlgoConfig(**{field: value}))


def test_check_config_rejects_refill_and_drop_together():
    with pytest.raises(ValueError, match="dynamic_sampling"):
        check_config(AlgoConfig(dynamic_sampling=True, zero_variance_filter=True))
