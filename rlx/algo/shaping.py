"""Batch shaping helpers: DAPO overlong punishment, zero-variance groups, truncation masking."""

from __future__ import annotations

import torch
from torch import Tensor

from rlx.algo.advantages import group_index
from rlx.algo.config import AlgoConfig


def overlong_penalty(lengths: Tensor, cfg: AlgoConfig, max_new_tokens: int) -> Tensor:
    """DAPO soft overlong punishment [N] (added to the reward).

    0 if len <= L_max - L_cache; ((L_max - L_cache) - len) / L_cache inside the last L_cache tokens;
    -1 beyond L_max. L_max = cfg.overlong_max_len or max_new_tokens, L_cache = cfg.overlong_cache.
    """
    l_max = cfg.overlong_max_len or max_new_tokens
    l_cache = cfg.overlong_cache
    if l_max <= 0 or l_cache <= 0 or l_cache >= l_max:
        raise ValueError(f"overlong shaping needs 0 < L_cache < L_max; got L_cache={l_cache}, L_max={l_max}")
    lengths = lengths.float()
    expected = float(l_max - l_cache)
    penalty = ((expected - lengths) / l_cache).clamp(max=0.0)  # [N]
    return torch.where(lengths > l_max, torch.full_like(penalty, -1.0), penalty)


def zero_variance_groups(rewards: Tensor, group: Tensor) -> Tensor:
    """Bool [N]: True on rows whose group's rewards are all equal (zero variance, zero advantage)."""
    if rewards.shape != group.shape or rewards.dim() != 1:
        raise ValueError(f"rewards {tuple(rewards.shape)} and group {tuple(group.shape)} must both be [N]")
    index, num_groups = group_index(group)
    rewards = rewards.float()
    high = torch.full((num_groups,), -torch.inf, device=rewards.device).scatter_reduce(0, index, rewards, "amax")
    low = torch.full((num_groups,), torch.inf, device=rewards.device).scatter_reduce(0, index, rewards, "amin")
    return torch.isclose(high, low)[index]


def mask_truncated(mask: Tensor, truncated: Tensor) -> Tensor:
    """Zero the loss mask [N, T] of completions that hit the length limit (truncated [N] bool)."""
    if truncated.shape != mask.shape[:1]:
        raise ValueError(f"truncated must be [N] = {tuple(mask.shape[:1])}, got {tuple(truncated.shape)}")
    return mask * (~truncated.bool()).to(mask.dtype).unsqueeze(-1)
