"""Group-baseline advantages: reward minus the group mean, then an optional normalization."""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from rlx.algo.config import AlgoConfig


def group_index(group: Tensor) -> tuple[Tensor, int]:
    """Map arbitrary group ids [N] to dense indices 0..G-1; returns (index [N], G)."""
    if group.dim() != 1:
        raise ValueError(f"group must be 1-D [N], got shape {tuple(group.shape)}")
    _, index = torch.unique(group, return_inverse=True)  # [N]
    return index, int(index.max().item()) + 1 if index.numel() else 0


def group_sum(values: Tensor, index: Tensor, num_groups: int) -> Tensor:
    """Sum of values [N] per dense group index; returns [G]."""
    return torch.zeros(num_groups, dtype=values.dtype, device=values.device).index_add_(0, index, values)


def group_mean_std(rewards: Tensor, group: Tensor) -> tuple[Tensor, Tensor]:
    """Per-row group mean and Bessel-corrected group std (0 for a group of one), both [N]."""
    index, num_groups = group_index(group)
    count = group_sum(torch.ones_like(rewards), index, num_groups)  # [G]
    mean = group_sum(rewards, index, num_groups) / count  # [G]
    centred = rewards - mean[index]  # [N]
    var = group_sum(centred * centred, index, num_groups) / (count - 1).clamp(min=1)  # [G]
    return mean[index], var.sqrt()[index]


def _norm_batch(centred: Tensor, group_std: Tensor, eps: float) -> Tensor:
    # ScaleRL: std of the centred advantages over the whole batch (Bessel-corrected), not of raw rewards.
    std = centred.std() if centred.numel() > 1 else centred.new_zeros(())
    return centred / (std + eps)


ADV_NORMS: dict[str, Callable[[Tensor, Tensor, float], Tensor]] = {
    "group": lambda centred, group_std, eps: centred / (group_std + eps),
    "batch": _norm_batch,
    "none": lambda centred, group_std, eps: centred,  # Dr.GRPO
}


def compute_advantages(rewards: Tensor, group: Tensor, cfg: AlgoConfig) -> Tensor:
    """Advantages [N] = (reward - group mean) normalized by cfg.adv_norm (group | batch | none)."""
    if rewards.shape != group.shape or rewards.dim() != 1:
        raise ValueError(f"rewards {tuple(rewards.shape)} and group {tuple(group.shape)} must both be [N]")
    rewards = rewards.float()
    mean, std = group_mean_std(rewards, group)  # [N], [N]
    return ADV_NORMS[cfg.adv_norm](rewards - mean, std, cfg.adv_eps)
