"""The trainable tensors of a policy (the LoRA adapter; every weight with model.finetune=full): what changes
between versions, so what an engine's own copy, a stale-rollout snapshot or a mismatch probe swaps."""

from __future__ import annotations

import torch


def trainable_state(policy) -> dict[str, torch.Tensor]:
    """Detached copies of the trainable tensors.  # name -> tensor"""
    return {n: q.detach().clone() for n, q in policy.named_parameters() if q.requires_grad}


@torch.no_grad()
def load_trainable(policy, state: dict[str, torch.Tensor]) -> None:
    """Copy `state` (from trainable_state) into the policy's trainable tensors, in place."""
    params = dict(policy.named_parameters())
    for n, v in state.items():
        params[n].copy_(v)
