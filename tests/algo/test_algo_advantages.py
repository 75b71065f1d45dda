"""Advantages: group baseline with group / batch / none normalization, pinned by hand and against TRL's std."""

from __future__ import annotations

import math

import pytest
import torch

from rlx.algo import AlgoConfig, compute_advantages

# group 0: rewards [2, 0]    -> mean 1, centred [1, -1],        Bessel std sqrt(2 / 1) = sqrt 2
# group 1: rewards [3, 3, 0, 2] -> mean 2, centred [1, 1, -2, 0], Bessel std sqrt(6 / 3) = sqrt 2
REWARDS = torch.tensor([2.0, 0.0, 3.0, 3.0, 0.0, 2.0])
GROUP = torch.tensor([0, 0, 1, 1, 1, 1])
CENTRED = [1.0, -1.0, 1.0, 1.0, -2.0, 0.0]
EPS = 1e-4


def test_group_norm_hand_values():
    adv = compute_advantages(REWARDS, GROUP, AlgoConfig(adv_norm="group", adv_eps=EPS))
    expected = torch.tensor([c / (math.sqrt(2.0) + EPS) for c in CENTRED])
    torch.testing.assert_close(adv, expected, rtol=1e-6, atol=1e-7)


def test_batch_norm_uses_std_of_centred_advantages():
    """ScaleRL: centred advantages over the batch [1,-1,1,1,-2,0]: mean 0, Bessel var 8/5."""
    adv = compute_advantages(REWARDS, GROUP, AlgoConfig(adv_norm="batch", adv_eps=EPS))
    expected = torch.tensor([c / (math.sqrt(8.0 / 5.0) + EPS) for c in CENTRED])
    torch.testing.assert_close(adv, expected, rtol=1e-6, atol=1e-7)
    # TRL's scale_rewards="batch" divides by the std of the RAW rewards instead: a different number here
    raw_std = math.sqrt(sum((r - 10.0 / 6.0) ** 2 for r in REWARDS.tolist()) / 5.0)
    assert abs(raw_std - math.sqrt(8.0 / 5.0)) > 0.1
    assert not torch.allclose(adv, torch.tensor(CENTRED) / (raw_std + EPS))


def test_none_is_centred_only():
    adv = compute_advantages(REWARDS, GROUP, AlgoConfig(adv_norm="none"))
    torch.testing.assert_close(adv, torch.tensor(CENTRED))


def test_group_ids_need_not_be_contiguous_or_sorted():
    perm = torch.tensor([4, 0, 2, 5, 1, 3])
    ids = torch.tensor([17, 17, 3, 3, 3, 3])[perm]  # interleaved, arbitrary ids
    adv = compute_advantages(REWARDS[perm], ids, AlgoConfig(adv_norm="group", adv_eps=EPS))
    expected = torch.tensor([c / (math.sqrt(2.0) + EPS) for c in CENTRED])[perm]
    torch.testing.assert_close(adv, expected, rtol=1e-6, atol=1e-7)


def test_zero_variance_and_singleton_groups_get_zero_advantage():
    adv = compute_advantages(torch.tensor([1.0, 1.0, 0.5]), torch.tensor([0, 0, 1]), AlgoConfig())
    assert torch.equal(adv, torch.zeros(3))


def test_group_norm_matches_trl_formula():
    """TRL: (r - group mean) / (nanstd(group) + 1e-4), with TRL's own nanstd (Bessel-corrected)."""
    nanstd = pytest.importorskip("trl.trainer.utils").nanstd
    g = torch.Generator().manual_seed(0)
    rewards = torch.randint(0, 3, (24,), generator=g).float() * 0.7
    groups = torch.arange(24) // 6  # TRL's layout: contiguous groups of num_generations
    grouped = rewards.view(-1, 6)
    trl_adv = (grouped - grouped.mean(1, keepdim=True)) / (nanstd(grouped, dim=1).unsqueeze(1) + 1e-4)
    ours = compute_advantages(rewards, groups, AlgoConfig(adv_norm="group", adv_eps=1e-4))
    torch.testing.assert_close(ours, trl_adv.flatten(), rtol=1e-6, atol=1e-6)


def test_bad_input_raises():
    with pytest.raises(ValueError, match="adv_norm"):
        compute_advantages(REWARDS, GROUP, AlgoConfig(adv_norm="zscore"))
    with pytest.raises(ValueError, match=r"\[N\]"):
        compute_advantages(REWARDS, GROUP[:3], AlgoConfig())
