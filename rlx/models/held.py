"""Frozen weights held in autocast's dtype for a block of forwards (docs/lean.md): autocast recasts a frozen weight
at every decode step; here each holds the copy autocast would make (bit-identical outputs) until the block ends."""

from __future__ import annotations

import contextlib

import torch
from torch import nn


def _held_linears(model: nn.Module, skip: set[str]) -> list[nn.Parameter]:
    """Frozen fp32 nn.Linear weights of `model` except `skip` (a sync rewrites them) and a tied head (fp32 lookup)."""
    tied = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    out = []
    for name, m in model.named_modules():
        w = getattr(m, "weight", None)
        if not isinstance(m, nn.Linear) or not isinstance(w, nn.Parameter):
            continue
        if (w.requires_grad or w.dtype != torch.float32 or id(w) in tied or f"{name}.weight" in skip
                or type(w.data) is not torch.Tensor):  # a DTensor shard (FSDP2) is left alone
            continue
        out.append(w)
    return out


@contextlib.contextmanager
def held_autocast_weights(model: nn.Module, device_type: str, skip: set[str] = frozenset()):
    """Frozen fp32 nn.Linear weights held in autocast's dtype within the block (not thread-safe)."""
    if not torch.is_autocast_enabled(device_type):
        yield
        return
    dtype = torch.get_autocast_dtype(device_type)
    weights = _held_linears(model, set(skip))
    saved = [w.data for w in weights]
    try:
        for w in weights:
            w.data = w.data.to(dtype)
        yield
    finally:
        for w, data in zip(weights, saved):
            w.data = data


def held_lm_logits(lm: nn.Module, fp32_head: bool, device_type: str, frozen: bool):
    """hidden [N, H] -> fp32 logits [N, V] as `lm_logits`, a frozen nn.Linear head cast once (tied too)."""
    from rlx.models.forward import lm_logits

    head = lm.lm_head
    if fp32_head or not frozen or type(head) is not nn.Linear or not torch.is_autocast_enabled(device_type):
        return lambda hidden: lm_logits(lm, hidden, fp32_head)
    dtype = torch.get_autocast_dtype(device_type)
    w = head.weight.detach().to(dtype)
    b = None if head.bias is None else head.bias.detach().to(dtype)
    return lambda hidden: torch.nn.functional.linear(hidden, w, b).float()
