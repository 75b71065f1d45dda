"""The `hf` engine: batched sampling with a KV cache on the trainer's own module (zero-copy: `sync` records the
version; async mode samples a deep copy). Unlike `model.generate` it returns the log-probs and entropies of
exactly the distribution it sampled from, with the training forward's position ids (docs/engine.md)."""

from __future__ import annotations

import torch

from rlx.run.device import DeviceSpec, autocast
from rlx.models.forward import causal_lm, decoder_forward, position_ids
from rlx.models.held import held_autocast_weights, held_lm_logits
from rlx.models.trainable import load_trainable, trainable_state
from rlx.quant.linear import held_dequantized
from rlx.rollout.base import RolloutBatch, RolloutEngine, SamplingParams, decode, draw_seeds, encode_prompts


def _top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Mask logits outside the smallest set whose probability reaches top_p.  # [N, V]"""
    if top_p >= 1.0:
        return logits
    sorted_logits, idx = logits.sort(dim=-1, descending=True)
    probs = sorted_logits.softmax(-1)
    drop = probs.cumsum(-1) - probs > top_p  # keep the token that crosses the threshold
    sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    return torch.full_like(logits, float("-inf")).scatter(-1, idx, sorted_logits)


def _top_k_filter(logits: torch.Tensor, top_k: int) -> torch.Tensor:
    """Mask logits below the k-th largest (ties at the k-th value are kept).  # [N, V]"""
    if top_k <= 0 or top_k >= logits.shape[-1]:
        return logits
    kth = logits.topk(top_k, dim=-1).values[..., -1:]  # [N, 1]
    return logits.masked_fill(logits < kth, float("-inf"))


def _inverse_cdf(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """The first token whose cumulative probability exceeds u * total (never p = 0).  # probs [N, V], u [N] -> [N]"""
    cdf = probs.double().cumsum(-1)  # [N, V]
    idx = torch.searchsorted(cdf, (u * cdf[:, -1]).unsqueeze(-1), right=True).squeeze(-1)
    last = probs.shape[-1] - 1 - (probs > 0).flip(-1).int().argmax(-1)  # last token with p > 0
    return torch.minimum(idx, last)


def _next_token(logits: torch.Tensor, sp: SamplingParams, u: torch.Tensor | None):
    """Token, log-probs and entropy of one decode step (greedy at temperature 0).
    # logits [N, V] float32, u [N] -> token [N], log-probs [N, V], entropy [N]"""
    if sp.temperature <= 0:
        logp_all = torch.log_softmax(logits, -1)
        return logits.argmax(-1), logp_all, -(logp_all.exp() * logp_all).sum(-1)
    scaled = _top_p_filter(_top_k_filter(logits / sp.temperature, sp.top_k), sp.top_p)
    logp_all = torch.log_softmax(scaled, -1)  # the sampled distribution, renormalized
    probs = scaled.softmax(-1)
    nxt = _inverse_cdf(probs, u)  # [N]
    if sp.top_p < 1.0 or sp.top_k > 0:  # masked tokens have p = 0: they add nothing to the entropy
        return nxt, logp_all, -(probs * logp_all.masked_fill(probs == 0, 0.0)).sum(-1)
    return nxt, logp_all, -(logp_all.exp() * logp_all).sum(-1)


STOP_TAIL_SLACK = 8  # tokens decoded before a stop string's length in characters (tokens that decode to nothing)


class StopStrings:
    """SamplingParams.stop token by token: whether each row's tail (stop length + STOP_TAIL_SLACK tokens) holds one."""

    def __init__(self, tok, stops: tuple[str, ...], rows: int):
        self.tok, self.stops = tok, tuple(stops)
        self.tail = max(len(s) for s in self.stops) + STOP_TAIL_SLACK
        self.rows: list[list[int]] = [[] for _ in range(rows)]

    def hits(self, tokens: list[int], alive: list[bool]) -> list[bool]:
        """Append each alive row's new token; True where the row's text now holds a stop string."""
        out = []
        for row, t, a in zip(self.rows, tokens, alive):
            if a:
                row.append(int(t))
                text = self.tok.decode(row[-self.tail:])
            out.append(a and any(s in text for s in self.stops))
        return out


class HFEngine(RolloutEngine):
    def __init__(self, cfg, tokenizer, policy, trainer: DeviceSpec, fp32_head: bool = False, own_weights: bool = False,
                 **_unused):
        self.tok, self.trainer, self.fp32_head, self.batch_size = tokenizer, trainer, fp32_head, int(cfg.batch_size)
        self.own_weights, self.trainer_policy, self.policy, self.version = own_weights, policy, policy, 0
        if own_weights:  # a frozen copy the generator thread samples from while the trainer updates
            import copy

            self.policy = copy.deepcopy(policy).eval()
            for q in self.policy.parameters():
                q.requires_grad_(False)

    def export_weights(self, policy):
        if policy is not self.trainer_policy:
            raise ValueError("the hf engine serves the trainer's own policy module; sync got another model")
        return trainable_state(policy) if self.own_weights else None

    def load_weights(self, payload, version: int) -> None:
        if self.own_weights:
            load_trainable(self.policy, payload)
        self.version = int(version)

    def noise_target(self):
        return self.policy

    @torch.no_grad()
    def generate(self, prompts, n, sampling: SamplingParams, generator, seeds=None):
        ids, mask = encode_prompts(self.tok, prompts)
        ids = ids.repeat_interleave(n, 0)  # [N, P]
        mask = mask.repeat_interleave(n, 0)
        group = torch.arange(len(prompts)).repeat_interleave(n)
        seeds = draw_seeds(generator, ids.shape[0]) if seeds is None else list(seeds)
        # a frozen base is cast to autocast's dtype (a packed one dequantized) once per call; synced weights are not
        synced = {n for n, q in self.trainer_policy.named_parameters() if q.requires_grad}
        with autocast(self.trainer), held_dequantized(self.policy), \
                held_autocast_weights(self.policy, self.trainer.device.type, skip=synced):
            chunks = [self._generate_chunk(ids[sl], mask[sl], group[sl], sampling, seeds[sl], synced)
                      for sl in (slice(s, s + self.batch_size) for s in range(0, ids.shape[0], self.batch_size))]
        batch = RolloutBatch.concat(chunks, self.tok.pad_token_id)
        batch.version = batch.token_version[:, 0].clone()  # versions only grow along a row: the first is the oldest
        return batch

    def _uniforms(self, seeds: list[int], T: int) -> torch.Tensor:
        """Row i's T uniforms from its own stream (seeds[i]), whatever batch it is in.  # [N, T]"""
        u = torch.stack([torch.rand(T, generator=torch.Generator().manual_seed(int(s)), dtype=torch.float64)
                         for s in seeds])
        return u.to(self.trainer.device)

    def _generate_chunk(self, ids, mask, group, sp: SamplingParams, seeds, synced: set[str]) -> RolloutBatch:
        lm = causal_lm(self.policy)
        dev = self.trainer.device
        head_name = next((n for n, q in self.policy.named_parameters() if q is lm.lm_head.weight), None)
        logits_of = held_lm_logits(lm, self.fp32_head, dev.type,
                                   frozen=not lm.lm_head.weight.requires_grad and head_name not in synced)
        stop = torch.tensor([self.tok.eos_token_id, *sp.stop_token_ids], device=dev)
        prompt_ids, prompt_mask = ids, mask
        ids, mask = ids.to(dev), mask.to(dev)
        N = ids.shape[0]
        fwd_version = self.version  # the weights that computed `hidden` (each token records them)
        out = decoder_forward(lm.model, ids, mask, position_ids(mask))
        cache = out.past_key_values  # the KV cache the model filled
        hidden = out.last_hidden_state[:, -1]  # [N, H]
        pos = position_ids(mask)[:, -1]  # [N]
        done = torch.zeros(N, dtype=torch.bool, device=dev)
        U = self._uniforms(seeds, sp.max_tokens) if sp.temperature > 0 else None  # [N, max_tokens]
        strings = StopStrings(self.tok, sp.stop, N) if sp.stop else None  # SamplingParams.stop
        toks, logps, ents, alive, versions = [], [], [], [], []
        for t in range(sp.max_tokens):
            versions.append(fwd_version)
            nxt, logp_all, ent = _next_token(logits_of(hidden), sp, U[:, t] if U is not None else None)
            alive.append(~done)
            nxt = torch.where(done, torch.full_like(nxt, self.tok.pad_token_id), nxt)
            toks.append(nxt)
            logps.append(logp_all.gather(-1, nxt.unsqueeze(-1)).squeeze(-1))
            ents.append(ent)
            if strings is not None:  # the row's text holds a stop string: it ends after this token
                hit = strings.hits(nxt.tolist(), (~done).tolist())
                done = done | torch.tensor(hit, dtype=torch.bool, device=dev)
            done = done | torch.isin(nxt, stop)
            if bool(done.all()) or t == sp.max_tokens - 1:
                break
            mask = torch.cat([mask, torch.ones(N, 1, dtype=mask.dtype, device=dev)], 1)
            pos = pos + 1
            if self.between_steps is not None:  # in-flight: new weights may arrive mid-sequence (KV cache kept)
                self.between_steps()
            fwd_version = self.version
            out = decoder_forward(lm.model, nxt.unsqueeze(-1), mask, pos.unsqueeze(-1), cache)
            cache, hidden = out.past_key_values, out.last_hidden_state[:, -1]
        comp = torch.stack(toks, 1).cpu()  # [N, T]
        cmask = torch.stack(alive, 1).long().cpu()  # [N, T]
        logp = torch.stack(logps, 1).float().cpu() * cmask
        ent = torch.stack(ents, 1).float().cpu() * cmask
        stop_ids = set(stop.tolist())
        texts = [decode(self.tok, row, m, stop_ids) for row, m in zip(comp, cmask)]
        tver = torch.tensor(versions, dtype=torch.long).expand(N, -1).masked_fill(cmask == 0, -1)  # [N, T]
        return RolloutBatch(prompt_ids, prompt_mask, comp, cmask, logp, ~done.cpu(), group, texts, ent,
                            token_version=tver)
