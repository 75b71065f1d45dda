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


# ---- the shaping step the loop calls (rlx.algo.Shaping) ---------------------------------------------
from dataclasses import dataclass  # noqa: E402

from rlx.algo import Shaping  # noqa: E402


@dataclass
class Rows:
    """The part of a RolloutBatch that shaping reads."""

    group: torch.Tensor  # [N]
    lengths: torch.Tensor  # [N]
    completion_mask: torch.Tensor  # [N, T]

    def select(self, keep):
        return Rows(self.group[keep], self.lengths[keep], self.completion_mask[keep])

    @classmethod
    def concat(cls, parts):
        return cls(*(torch.cat([getattr(p, f) for p in parts]) for f in ("group", "lengths", "completion_mask")))


def _rows(group, lengths):
    return Rows(torch.tensor(group), torch.tensor(lengths), torch.ones(len(group), 2))


def test_shaping_rewards_add_the_overlong_penalty_only_when_on():
    """L_max = max_new_tokens 16, L_cache 4: 0 up to 12, (12 - 14) / 4 = -0.5 at 14, -1 beyond 16."""
    batch, rewards = _rows([0, 0, 1, 1], [4, 14, 17, 12]), torch.tensor([1.0, 1.0, 1.0, 0.0])
    on = Shaping(AlgoConfig(overlong_shaping=True, overlong_cache=4), 2, 2, 16)
    torch.testing.assert_close(on.rewards(batch, rewards), torch.tensor([1.0, 0.5, 0.0, 0.0]))
    assert Shaping(AlgoConfig(), 2, 2, 16).rewards(batch, rewards) is rewards


def test_shaping_records_pass_rates_before_any_refill():
    """Prompt a passes 2/2 (rate 1 >= 0.9: retired), b 1/2. Group 0 (rewards 1, 1) has no variance and goes;
    the refill asked for the one missing group already sees a retired, and its group gets id 2 (after 0, 1)."""
    batch = _rows([0, 0, 1, 1], [3, 3, 3, 3])
    rewards, passed = torch.tensor([1.0, 1.0, 1.0, 0.0]), torch.tensor([1.0, 1.0, 1.0, 0.0])
    shaping = Shaping(AlgoConfig(dynamic_sampling=True, no_positive_resampling=True), 2, 2, 8, PassRateCurriculum(0.9))
    seen = []

    def refill(n):
        seen.append((n, shaping.curriculum.is_retired("a")))
        return _rows([0, 0], [5, 5]), torch.tensor([1.0, 0.0])

    examples = [type("E", (), {"key": k})() for k in ("a", "b")]
    out = shaping.shape(examples, batch, rewards, passed, refill)
    assert seen == [(1, True)]
    assert out.batch.group.tolist() == [1, 1, 2, 2] and out.rewards.tolist() == [1.0, 0.0, 1.0, 0.0]
    assert out.gen_tokens == 4  # the refill's 2 rows x 2 completion tokens
    assert out.metrics == {"train/retired_prompts": 1, "train/dynamic_sampling/rounds": 1,
                           "train/dynamic_sampling/refilled_groups": 1, "train/dynamic_sampling/dropped_groups": 1}
