"""Log-probs and entropies of target tokens through the LM head without the [N, T, V] logits (docs/lean.md):
`chunk` tokens at a time, each chunk's logits recomputed in the backward, only the positions that need one."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def head_dtype(hidden: torch.Tensor, weight: torch.Tensor, fp32_head: bool) -> torch.dtype:
    """The dtype the head's matmul runs in: fp32 with `fp32_head`, else what `lm_head(hidden)` would use."""
    if fp32_head:
        return torch.float32
    dev = hidden.device.type
    if torch.is_autocast_enabled(dev):
        return torch.get_autocast_dtype(dev)
    return weight.dtype


def _chunk_logits(h, w, b, dtype, inv_temp: float) -> torch.Tensor:
    """fp32 logits / temperature of one chunk.  # h [c, H] -> [c, V]"""
    z = F.linear(h.to(dtype), w.to(dtype), None if b is None else b.to(dtype)).float()
    return z * inv_temp if inv_temp != 1.0 else z


class _ChunkedHead(torch.autograd.Function):
    """(log p(target), entropy) per row of `hidden`, chunk by chunk; the entropy is not differentiated."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, target, inv_temp: float, chunk: int, dtype, want_entropy: bool):
        M = hidden.shape[0]
        logp = hidden.new_empty(M, dtype=torch.float32)  # [M]
        lse = hidden.new_empty(M, dtype=torch.float32)  # [M] log-sum-exp, all the backward keeps per token
        ent = hidden.new_empty(M, dtype=torch.float32) if want_entropy else None
        with torch.autocast(hidden.device.type, enabled=False):
            for s in range(0, M, chunk):
                z = _chunk_logits(hidden[s: s + chunk], weight, bias, dtype, inv_temp)  # [c, V]
                lse_c = torch.logsumexp(z, -1)
                logp[s: s + chunk] = z.gather(-1, target[s: s + chunk, None]).squeeze(-1) - lse_c
                lse[s: s + chunk] = lse_c
                if want_entropy:  # H = -sum_v p_v log p_v
                    logp_all = z.sub_(lse_c[:, None])
                    ent[s: s + chunk] = -(torch.exp(logp_all) * logp_all).sum(-1)
        ctx.save_for_backward(hidden, weight, bias, target, lse)
        ctx.inv_temp, ctx.chunk, ctx.dtype = inv_temp, chunk, dtype
        if ent is not None:
            ctx.mark_non_differentiable(ent)
        return logp, ent

    @staticmethod
    def backward(ctx, g_logp, _g_ent):
        hidden, weight, bias, target, lse = ctx.saved_tensors
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        inv_temp, chunk, dtype = ctx.inv_temp, ctx.chunk, ctx.dtype
        g_h = torch.empty_like(hidden) if need_h else None
        g_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if need_w else None
        g_b = torch.zeros(bias.shape, dtype=torch.float32, device=bias.device) if need_b else None
        with torch.autocast(hidden.device.type, enabled=False):
            for s in range(0, hidden.shape[0], chunk):
                h = hidden[s: s + chunk]
                z = _chunk_logits(h, weight, bias, dtype, inv_temp)  # [c, V] recomputed
                g = g_logp[s: s + chunk, None].float()  # [c, 1]
                # d logp / d z = onehot(target) - softmax(z); z = logits * inv_temp
                g_z = torch.exp(z - lse[s: s + chunk, None]).mul_(-g)  # [c, V]
                g_z.scatter_add_(-1, target[s: s + chunk, None], g)
                if inv_temp != 1.0:
                    g_z.mul_(inv_temp)
                g_z = g_z.to(dtype)
                if need_h:
                    g_h[s: s + chunk] = (g_z @ weight.to(dtype)).to(hidden.dtype)
                if need_w:
                    g_w.add_((g_z.t() @ h.to(dtype)).float())
                if need_b:
                    g_b.add_(g_z.float().sum(0))
        g_w = g_w.to(weight.dtype) if g_w is not None else None
        g_b = g_b.to(bias.dtype) if g_b is not None else None
        return g_h, g_w, g_b, None, None, None, None, None


def chunked_head(head: nn.Module, hidden: torch.Tensor, target: torch.Tensor, temperature: float,
                 fp32_head: bool, chunk: int, want_entropy: bool):
    """(logp [M], entropy [M] | None) of target [M] after hidden [M, H], `chunk` at a time (nn.Linear: fused)."""
    inv_temp = 1.0 / max(temperature, 1e-6)
    if type(head) is nn.Linear:
        dtype = head_dtype(hidden, head.weight, fp32_head)
        return _ChunkedHead.apply(hidden, head.weight, head.bias, target, inv_temp, chunk, dtype, want_entropy)
    if hidden.shape[0] == 0:  # no position needs a log-prob (every row's loss mask is empty)
        empty = hidden.new_zeros(0, dtype=torch.float32)
        return empty, (empty if want_entropy else None)
    from torch.utils.checkpoint import checkpoint

    pieces = [checkpoint(_module_chunk, head, hidden[s: s + chunk], target[s: s + chunk], inv_temp, fp32_head,
                         want_entropy, use_reentrant=False) for s in range(0, hidden.shape[0], chunk)]
    logp = torch.cat([p[0] for p in pieces])
    return logp, (torch.cat([p[1] for p in pieces]).detach() if want_entropy else None)


def _module_chunk(head, h, target, inv_temp, fp32_head, want_entropy):
    z = _module_logits(head, h, fp32_head) * inv_temp  # [c, V]
    logp_all = torch.log_softmax(z, -1)
    logp = logp_all.gather(-1, target[:, None]).squeeze(-1)
    ent = -(logp_all.exp() * logp_all).sum(-1).detach() if want_entropy else logp.new_zeros(0)
    return logp, ent


def _module_logits(head, h, fp32_head):
    if fp32_head and hasattr(head, "weight"):  # fp32 under autocast too
        b = getattr(head, "bias", None)
        with torch.autocast(h.device.type, enabled=False):
            return F.linear(h.float(), head.weight.float(), None if b is None else b.float())
    return head(h).float()


def full_head(head: nn.Module, hidden: torch.Tensor, target: torch.Tensor, temperature: float,
              fp32_head: bool, want_entropy: bool):
    """The reference path: all logits of `hidden` [M, H] at once (what chunked_head must equal)."""
    z = _module_logits(head, hidden, fp32_head) / max(temperature, 1e-6)  # [M, V]
    logp_all = torch.log_softmax(z, -1)
    logp = logp_all.gather(-1, target[:, None]).squeeze(-1)  # [M]
    if not want_entropy:
        return logp, None
    with torch.no_grad():
        return logp, -(logp_all.exp() * logp_all).sum(-1).float()
