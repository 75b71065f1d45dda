"""In-process rollout with HF transformers models: batched sampling with a KV cache.

Departs from `model.generate` on purpose: it returns the sampling log-probs and entropies of
exactly the distribution it sampled from (temperature, top-p, optional fp32 head), and uses the
same position ids as the training forward, so old log-probs match the trainer's up to float noise.
"""

from __future__ import annotations

import torch

from rlx.models.forward import causal_lm, lm_logits, position_ids
from rlx.rollout.base import RolloutBackend, RolloutBatch


def _top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Mask logits outside the smallest set whose probability reaches top_p.  # [N, V]"""
    if top_p >= 1.0:
        return logits
    sorted_logits, idx = logits.sort(dim=-1, descending=True)
    probs = sorted_logits.softmax(-1)
    drop = probs.cumsum(-1) - probs > top_p  # keep the token that crosses the threshold
    sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    return torch.full_like(logits, float("-inf")).scatter(-1, idx, sorted_logits)


class HFRollout(RolloutBackend):
    def __init__(self, tokenizer, max_new_tokens: int, temperature: float = 1.0, top_p: float = 1.0,
                 fp32_head: bool = False, batch_size: int = 512):
        if max_new_tokens < 1:
            raise ValueError("rollout.max_new_tokens must be >= 1")
        if not 0.0 < top_p <= 1.0:
            raise ValueError("rollout.top_p must be in (0, 1]")
        self.tok = tokenizer
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.top_p = top_p
        self.fp32_head = fp32_head
        self.batch_size = batch_size

    def encode_prompts(self, prompts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        enc = [self.tok(p, add_special_tokens=False).input_ids for p in prompts]
        P = max(len(e) for e in enc)
        ids = torch.full((len(enc), P), self.tok.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(enc), P), dtype=torch.long)
        for i, e in enumerate(enc):
            ids[i, P - len(e) :] = torch.tensor(e, dtype=torch.long)
            mask[i, P - len(e) :] = 1
        return ids, mask

    @torch.no_grad()
    def generate(self, model, prompts, group_size, generator=None, temperature=None, max_new_tokens=None):
        """G samples per prompt (temperature 0 = greedy). Rows are prompt-major: row i is prompt i // G."""
        temperature = self.temperature if temperature is None else temperature
        max_new = max_new_tokens or self.max_new_tokens
        ids, mask = self.encode_prompts(prompts)
        ids = ids.repeat_interleave(group_size, 0)  # [N, P]
        mask = mask.repeat_interleave(group_size, 0)
        group = torch.arange(len(prompts)).repeat_interleave(group_size)
        chunks = [
            self._generate_chunk(model, ids[sl], mask[sl], group[sl], temperature, max_new, generator)
            for sl in (slice(s, s + self.batch_size) for s in range(0, ids.shape[0], self.batch_size))
        ]
        return RolloutBatch.concat(chunks, self.tok.pad_token_id)

    def decode(self, row: torch.Tensor, m: torch.Tensor) -> str:
        toks = [t for t, keep in zip(row.tolist(), m.tolist()) if keep and t != self.tok.eos_token_id]
        return self.tok.decode(toks, skip_special_tokens=True)

    def _generate_chunk(self, model, ids, mask, group, temperature, max_new, generator) -> RolloutBatch:
        lm = causal_lm(model)
        eos = self.tok.eos_token_id
        N = ids.shape[0]
        prompt_mask = mask
        out = lm.model(input_ids=ids, attention_mask=mask, position_ids=position_ids(mask), use_cache=True)
        cache = out.past_key_values  # the KV cache the model filled
        hidden = out.last_hidden_state[:, -1]  # [N, H]
        pos = position_ids(mask)[:, -1]  # [N]
        done = torch.zeros(N, dtype=torch.bool)
        toks, logps, ents, alive = [], [], [], []
        for t in range(max_new):
            logits = lm_logits(lm, hidden, self.fp32_head)  # [N, V] float32
            if temperature <= 0:
                logp_all = torch.log_softmax(logits, -1)
                nxt = logits.argmax(-1)
            else:
                scaled = logits / temperature
                logp_all = torch.log_softmax(scaled, -1)
                probs = _top_p_filter(scaled, self.top_p).softmax(-1)
                nxt = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
            alive.append(~done)
            nxt = torch.where(done, torch.full_like(nxt, self.tok.pad_token_id), nxt)
            toks.append(nxt)
            logps.append(logp_all.gather(-1, nxt.unsqueeze(-1)).squeeze(-1))
            ents.append(-(logp_all.exp() * logp_all).sum(-1))
            done = done | (nxt == eos)
            if bool(done.all()) or t == max_new - 1:
                break
            mask = torch.cat([mask, torch.ones(N, 1, dtype=mask.dtype)], 1)
            pos = pos + 1
            out = lm.model(input_ids=nxt.unsqueeze(-1), attention_mask=mask, position_ids=pos.unsqueeze(-1),
                           cache=cache, use_cache=True)
            cache = out.past_key_values  # the KV cache the model filled
            hidden = out.last_hidden_state[:, -1]
        comp = torch.stack(toks, 1)  # [N, T]
        cmask = torch.stack(alive, 1).long()  # [N, T]
        logp = torch.stack(logps, 1) * cmask
        ent = torch.stack(ents, 1) * cmask
        texts = [self.decode(row, m) for row, m in zip(comp, cmask)]
        return RolloutBatch(ids, prompt_mask, comp, cmask, logp, ~done, group, texts, ent)


BACKENDS = {"hf": HFRollout}


def build_rollout(cfg, tokenizer, fp32_head: bool = False) -> RolloutBackend:
    if cfg.backend not in BACKENDS:
        raise ValueError(f"rollout.backend: unknown backend '{cfg.backend}'; registered: {sorted(BACKENDS)}")
    return BACKENDS[cfg.backend](tokenizer, cfg.max_new_tokens, cfg.temperature, cfg.top_p, fp32_head, cfg.batch_size)
