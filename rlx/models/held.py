"""Frozen weights held in autocast's dtype for a block of forwards (token-by-token sampling).

Under autocast, F.linear casts its fp32 weight to the autocast dtype at every call; autocast caches the
cast only for weights that require grad. A frozen base (LoRA) is therefore recast at every decode step
(what that costs: docs/lean.md, "Generation with the hf engine under bf16"). Within
`held_autocast_weights`, each frozen fp32 nn.Linear weight holds its autocast-dtype copy instead: the
value autocast would have made, so the outputs are bit-identical; the fp32 weights come back on exit.
"""

from __future__ import annotations

import contextlib

import torch
from torch import nn


def _held_linears(model: nn.Module, skip: set[str]) -> list[nn.Parameter]:
    """Frozen fp32 nn.Linear weights of `model`, except those named in `skip` (weights a sync rewrites in
    place) and those shared with an embedding (a tied LM head: the lookup must stay fp32)."""
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
    """Within the block (under an enabled autocast on `device_type`; a no-op otherwise), each frozen fp32
    nn.Linear weight of `model` is held in the autocast dtype. Not for a module another thread runs
    meanwhile: its weights change dtype for the block's duration."""
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
    """hidden [N, H] -> float32 logits [N, V], as `lm_logits(lm, hidden, fp32_head)` computes them, with a
    frozen nn.Linear head's autocast-dtype weight cast once here, not at every call (a tied head is an
    embedding's weight too, so `held_autocast_weights` leaves it fp32). `frozen`: nothing rewrites the head
    until the returned function is dropped."""
    from rlx.models.forward import lm_logits

    head = lm.lm_head
    if fp32_head or not frozen or type(head) is not nn.Linear or not torch.is_autocast_enabled(device_type):
        return lambda hidden: lm_logits(lm, hidden, fp32_head)
    dtype = torch.get_autocast_dtype(device_type)
    w = head.weight.detach().to(dtype)
    b = None if head.bias is None else head.bias.detach().to(dtype)
    return lambda hidden: torch.nn.functional.linear(hidden, w, b).float()
