"""The `hf` engine: in-process batched sampling with a KV cache on the trainer's own model.

Colocated and zero-copy: the engine's copy of the weights IS the trainer's policy module, so
`sync` only records the version, and AQN noise put on `noise_target()` is noise on the policy
(restored before the update). Departs from `model.generate` on purpose: it returns the log-probs
and entropies of exactly the distribution it sampled from (see rlx.rollout.base), and uses the
same position ids as the training forward, so behaviour log-probs match the trainer's up to
float noise. Sampling runs on the trainer's device; the returned batch lives on the CPU.
"""

from __future__ import annotations

import torch

from rlx.device import Trainer, autocast
from rlx.models.forward import causal_lm, decoder_forward, lm_logits, position_ids
from rlx.rollout.base import RolloutBatch, RolloutEngine, SamplingParams


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


def encode_prompts(tok, prompts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded prompt ids and mask.  # [B, P] each"""
    enc = [tok(p, add_special_tokens=False).input_ids for p in prompts]
    P = max(len(e) for e in enc)
    ids = torch.full((len(enc), P), tok.pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(enc), P), dtype=torch.long)
    for i, e in enumerate(enc):
        ids[i, P - len(e):] = torch.tensor(e, dtype=torch.long)
        mask[i, P - len(e):] = 1
    return ids, mask


def decode(tok, row: torch.Tensor, m: torch.Tensor, stop_ids: set[int]) -> str:
    toks = [t for t, keep in zip(row.tolist(), m.tolist()) if keep and t not in stop_ids]
    return tok.decode(toks, skip_special_tokens=True)


class HFEngine(RolloutEngine):
    def __init__(self, cfg, tokenizer, policy, trainer: Trainer, fp32_head: bool = False, **_unused):
        # base_dir / seed / max_len / quant_format: the policy module itself is sampled, with the caller's generator
        self.tok = tokenizer
        self.policy = policy
        self.trainer = trainer
        self.fp32_head = fp32_head
        self.batch_size = int(cfg.batch_size)
        self.version = 0

    def sync(self, policy, version: int) -> None:
        if policy is not self.policy:
            raise ValueError("the hf engine samples from the trainer's own policy module; sync got another model")
        self.version = int(version)

    def noise_target(self):
        return self.policy

    def _device_generator(self, generator: torch.Generator) -> torch.Generator:
        """The CPU stream itself on a CPU trainer; on CUDA a device stream seeded from it."""
        if self.trainer.device.type == "cpu":
            return generator
        seed = int(torch.randint(2**62, (1,), generator=generator))
        return torch.Generator(device=self.trainer.device).manual_seed(seed)

    @torch.no_grad()
    def generate(self, prompts, n, sampling: SamplingParams, generator):
        ids, mask = encode_prompts(self.tok, prompts)
        ids = ids.repeat_interleave(n, 0)  # [N, P]
        mask = mask.repeat_interleave(n, 0)
        group = torch.arange(len(prompts)).repeat_interleave(n)
        gen = self._device_generator(generator)
        with autocast(self.trainer):  # bf16 trainers sample in bf16 too (the head stays fp32 if asked)
            chunks = [self._generate_chunk(ids[sl], mask[sl], group[sl], sampling, gen)
                      for sl in (slice(s, s + self.batch_size) for s in range(0, ids.shape[0], self.batch_size))]
        batch = RolloutBatch.concat(chunks, self.tok.pad_token_id)
        batch.version = torch.full((len(batch),), self.version, dtype=torch.long)
        return batch

    def _generate_chunk(self, ids, mask, group, sp: SamplingParams, generator) -> RolloutBatch:
        lm = causal_lm(self.policy)
        dev = self.trainer.device
        stop = torch.tensor([self.tok.eos_token_id, *sp.stop_token_ids], device=dev)
        prompt_ids, prompt_mask = ids, mask
        ids, mask = ids.to(dev), mask.to(dev)
        N = ids.shape[0]
        out = decoder_forward(lm.model, ids, mask, position_ids(mask))
        cache = out.past_key_values  # the KV cache the model filled
        hidden = out.last_hidden_state[:, -1]  # [N, H]
        pos = position_ids(mask)[:, -1]  # [N]
        done = torch.zeros(N, dtype=torch.bool, device=dev)
        filtered = sp.top_p < 1.0 or sp.top_k > 0
        toks, logps, ents, alive = [], [], [], []
        for t in range(sp.max_tokens):
            logits = lm_logits(lm, hidden, self.fp32_head)  # [N, V] float32
            if sp.temperature <= 0:
                logp_all = torch.log_softmax(logits, -1)
                nxt = logits.argmax(-1)
                ent = -(logp_all.exp() * logp_all).sum(-1)
            else:
                scaled = _top_p_filter(_top_k_filter(logits / sp.temperature, sp.top_k), sp.top_p)
                logp_all = torch.log_softmax(scaled, -1)  # the sampled distribution, renormalized
                probs = scaled.softmax(-1)
                nxt = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
                if filtered:  # masked tokens have p = 0: they add nothing to the entropy
                    ent = -(probs * logp_all.masked_fill(probs == 0, 0.0)).sum(-1)
                else:
                    ent = -(logp_all.exp() * logp_all).sum(-1)
            alive.append(~done)
            nxt = torch.where(done, torch.full_like(nxt, self.tok.pad_token_id), nxt)
            toks.append(nxt)
            logps.append(logp_all.gather(-1, nxt.unsqueeze(-1)).squeeze(-1))
            ents.append(ent)
            done = done | torch.isin(nxt, stop)
            if bool(done.all()) or t == sp.max_tokens - 1:
                break
            mask = torch.cat([mask, torch.ones(N, 1, dtype=mask.dtype, device=dev)], 1)
            pos = pos + 1
            out = decoder_forward(lm.model, nxt.unsqueeze(-1), mask, pos.unsqueeze(-1), cache)
            cache = out.past_key_values  # the KV cache the model filled
            hidden = out.last_hidden_state[:, -1]
        comp = torch.stack(toks, 1).cpu()  # [N, T]
        cmask = torch.stack(alive, 1).long().cpu()  # [N, T]
        logp = torch.stack(logps, 1).float().cpu() * cmask
        ent = torch.stack(ents, 1).float().cpu() * cmask
        stop_ids = set(stop.tolist())
        texts = [decode(self.tok, row, m, stop_ids) for row, m in zip(comp, cmask)]
        return RolloutBatch(prompt_ids, prompt_mask, comp, cmask, logp, ~done.cpu(), group, texts, ent)
