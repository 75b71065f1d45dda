"""How the update splits a rollout batch into micro-batches, and the forward of one micro-batch. Token weights come
from the full batch, so every split gives the same loss and gradient (the knobs: docs/lean.md)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlx.models.forward import shared_prefix_logprobs, token_logprobs


@dataclass
class MicroBatch:
    rows: slice | torch.Tensor  # which rows of the batch
    ids: torch.Tensor | None  # [n, P' + T'] input ids on the trainer device (unshared)
    attn: torch.Tensor | None  # [n, P' + T']
    T: int  # completion columns T' <= T this micro-batch computes
    need: torch.Tensor | None = None  # [n, T'] positions whose log-prob is used (None: every position)
    prompt_ids: torch.Tensor | None = None  # [b, P'] one row per group (shared prefix)
    prompt_mask: torch.Tensor | None = None  # [b, P']
    completion_ids: torch.Tensor | None = None  # [n, T']
    completion_mask: torch.Tensor | None = None  # [n, T']
    repeats: torch.Tensor | None = None  # [b] rows per group
    grad: bool = True  # False: every row's loss term is 0 (forward only, for the metrics)

    @property
    def shared(self) -> bool:
        return self.repeats is not None


def _units(batch, shared: bool) -> list[torch.Tensor]:
    """Row indices that share a micro-batch: one row each, or (shared) each run of one group's rows with one prompt."""
    N = len(batch)
    if not shared:
        return [torch.tensor([i]) for i in range(N)]
    out, start = [], 0
    for i in range(1, N + 1):
        if i == N or batch.group[i] != batch.group[start] or not torch.equal(batch.prompt_ids[i], batch.prompt_ids[start]):
            out.append(torch.arange(start, i))
            start = i
    return out


def _bins(units: list[torch.Tensor], batch, size: int, tokens: int, shared: bool) -> list[torch.Tensor]:
    """Consecutive units into bins of at most `size` rows and (`tokens` > 0) padded tokens; a big unit stays whole."""
    clen, plen = batch.completion_mask.sum(1), batch.prompt_mask.sum(1)
    bins, cur, cp, ct, cu = [], [], 0, 0, 0

    def cost(n_units, n_rows, pp, tc):  # tokens the forward computes
        return (n_units * pp + n_rows * tc) if shared else n_rows * (pp + tc)

    for u in units:
        pp, tc = max(cp, int(plen[u].max())), max(ct, int(clen[u].max()))
        n_rows = sum(len(x) for x in cur) + len(u)
        over = n_rows > size or (tokens > 0 and cost(cu + 1, n_rows, pp, tc) > tokens)
        if cur and over:
            bins.append(torch.cat(cur))
            cur, cu = [], 0
            pp, tc = int(plen[u].max()), int(clen[u].max())
        cur.append(u)
        cu += 1
        cp, ct = pp, tc
    if cur:
        bins.append(torch.cat(cur))
    return bins


def micro_batches(batch, a, dev, need: torch.Tensor | None = None,
                  frozen: torch.Tensor | None = None) -> list[MicroBatch]:
    """Split `batch` by the algo config `a`. `need` [N, T]: positions the loss and metrics use (the chunked head skips
    the rest). `frozen` [N] bool: rows whose loss term is 0 anyway; the binned path runs them apart, forward only."""
    N, P, T = len(batch), batch.prompt_ids.shape[1], batch.completion_ids.shape[1]
    size, tokens, shared = a.micro_batch_size, a.micro_batch_tokens, a.shared_prefix
    trim = a.trim_padding or tokens > 0
    if not trim and not shared:  # the plain split: fixed row blocks over the full padded width
        ids, attn = batch.input_ids.to(dev), batch.attention_mask.to(dev)  # [N, P+T]
        return [MicroBatch(slice(s, s + size), ids[s: s + size], attn[s: s + size], T,
                           need=_need(need, slice(s, s + size), T, dev, a))
                for s in range(0, N, size)]
    units = _units(batch, shared)
    if trim:  # longest first, so each bin's rows have similar lengths
        longest = torch.tensor([int(batch.completion_mask[u].sum(1).max()) for u in units])
        units = [units[i] for i in torch.argsort(longest, descending=True, stable=True).tolist()]
    if frozen is None or not bool(frozen.any()):
        bins = [(r, True) for r in _bins(units, batch, size, tokens, shared)]
    else:  # units that need no gradient are binned apart, after the others
        still = [u for u in units if bool(frozen[u].all())]
        live = [u for u in units if not bool(frozen[u].all())]
        bins = [(r, True) for r in _bins(live, batch, size, tokens, shared)] + \
               [(r, False) for r in _bins(still, batch, size, tokens, shared)]
    out = []
    for r, grad in bins:
        tc = max(1, int(batch.completion_mask[r].sum(1).max())) if trim else T
        pp = max(1, int(batch.prompt_mask[r].sum(1).max())) if trim else P
        c_ids, c_mask = batch.completion_ids[r, :tc], batch.completion_mask[r, :tc]
        p_ids, p_mask = batch.prompt_ids[r, P - pp:], batch.prompt_mask[r, P - pp:]
        mb_need = _need(need, r, tc, dev, a)
        if shared:
            first = torch.ones(len(r), dtype=torch.bool)
            first[1:] = (batch.group[r][1:] != batch.group[r][:-1]) | (p_ids[1:] != p_ids[:-1]).any(1)
            starts = first.nonzero(as_tuple=True)[0]
            repeats = torch.diff(torch.cat([starts, torch.tensor([len(r)])]))
            out.append(MicroBatch(r.to(dev), None, None, tc, mb_need, p_ids[starts].to(dev), p_mask[starts].to(dev),
                                  c_ids.to(dev), c_mask.to(dev), repeats.to(dev), grad=grad))
        else:
            out.append(MicroBatch(r.to(dev), torch.cat([p_ids, c_ids], 1).to(dev), torch.cat([p_mask, c_mask], 1).to(dev),
                                  tc, mb_need, grad=grad))
    return out


def _need(need, rows, tc: int, dev, a):
    """The micro-batch's used positions, only when the chunked head can skip the others."""
    if need is None or a.logprob_chunk <= 0:
        return None
    return need[rows, :tc].to(dev)


def forward_logprobs(model, mb: MicroBatch, temperature: float, fp32_head: bool, chunk: int,
                     with_entropy: bool = False, decoder=None):
    """Log-probs [n, T'] (and entropies) of one micro-batch's completions under `model`."""
    if mb.shared:
        return shared_prefix_logprobs(model, mb.prompt_ids, mb.prompt_mask, mb.completion_ids, mb.completion_mask,
                                      mb.repeats, temperature, fp32_head, with_entropy, decoder, chunk, mb.need)
    return token_logprobs(model, mb.ids, mb.attn, mb.T, temperature, fp32_head, with_entropy, decoder, chunk, mb.need)


@torch.no_grad()
def batch_logprobs(model, mbs, like: torch.Tensor, temperature: float, fp32_head: bool, chunk: int) -> torch.Tensor:
    """No-grad log-probs of the micro-batches' completion tokens, in a zero tensor shaped and placed like
    `like` (the batch's rollout log-probs): the reference policy's, or the trainer's under another version.  # [N, T]"""
    out = torch.zeros_like(like)
    for mb in mbs:
        out[mb.rows, : mb.T] = forward_logprobs(model, mb, temperature, fp32_head, chunk).float()
    return out
