"""Policy forward passes shared by rollout and training: hidden states -> (optionally fp32) LM head."""

from __future__ import annotations

import functools
import inspect

import torch
import torch.nn.functional as F

from rlx.models.logprob_head import chunked_head, full_head


def causal_lm(model):
    """The underlying transformers *ForCausalLM (PEFT wraps it; LoRA layers are injected in place)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


@functools.lru_cache(maxsize=None)
def _cache_kwarg(forward_cls) -> str:
    """The KV-cache argument of a decoder's forward: `past_key_values` (transformers <= 5.19) or `cache`."""
    params = inspect.signature(forward_cls.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def decoder_forward(decoder, input_ids, attention_mask, position_ids, cache=None):
    """decoder(...) with use_cache, passing `cache` under the name this transformers release expects."""
    kw = {_cache_kwarg(type(decoder)): cache} if cache is not None else {}
    return decoder(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=True, **kw)


def position_ids(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions that skip left padding, the same in generation and in training.  # [N, L]"""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def lm_logits(lm, hidden: torch.Tensor, fp32_head: bool) -> torch.Tensor:
    """Logits from final hidden states; `fp32_head` computes the head in float32 (ScaleRL)."""
    if fp32_head:  # in fp32 under autocast too, which would otherwise run this F.linear in its own dtype
        w = lm.lm_head.weight.float()
        b = lm.lm_head.bias.float() if getattr(lm.lm_head, "bias", None) is not None else None
        with torch.autocast(hidden.device.type, enabled=False):
            return F.linear(hidden.float(), w, b)
    return lm.lm_head(hidden).float()


def token_logprobs(
    model,
    input_ids: torch.Tensor,  # [N, P+T]
    attention_mask: torch.Tensor,  # [N, P+T]
    n_completion: int,  # T
    temperature: float = 1.0,
    fp32_head: bool = False,
    with_entropy: bool = False,
    decoder=None,
    chunk: int = 0,
    need: torch.Tensor | None = None,  # [N, T]
):
    """Log-probs [N, T] of the last T tokens (`with_entropy`: and detached entropies [N, T]); `decoder`: its DDP
    wrapper; `chunk` > 0: the head in chunks; `need` > 0: the positions used (others 0, no head FLOP)."""
    lm = causal_lm(model)
    out = (decoder if decoder is not None else lm.model)(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids(attention_mask))
    hidden = out.last_hidden_state[:, -n_completion - 1 : -1]  # [N, T, H] positions predicting the completion
    return head_logprobs(lm, hidden, input_ids[:, -n_completion:], temperature, fp32_head, with_entropy, chunk, need)


def head_logprobs(lm, hidden, target, temperature, fp32_head, with_entropy, chunk=0, need=None):
    """Log-probs (and entropies) of `target` [N, T] from the hidden states [N, T, H] that predict it."""
    if chunk <= 0 and need is None:  # the full-vocabulary path over every position
        logits = lm_logits(lm, hidden, fp32_head) / max(temperature, 1e-6)  # [N, T, V]
        logp_all = torch.log_softmax(logits, dim=-1)  # [N, T, V]
        logp = logp_all.gather(-1, target.unsqueeze(-1)).squeeze(-1)  # [N, T]
        if not with_entropy:
            return logp
        with torch.no_grad():
            entropy = -(logp_all.exp() * logp_all).sum(-1).float()  # [N, T]
        return logp, entropy
    N, T = target.shape
    idx = (need.reshape(-1) > 0).nonzero(as_tuple=True)[0] if need is not None else torch.arange(N * T, device=target.device)
    h = hidden.reshape(N * T, -1).index_select(0, idx)  # [M, H] only the positions that are used
    tgt = target.reshape(-1).index_select(0, idx)  # [M]
    if chunk > 0:
        logp_m, ent_m = chunked_head(lm.lm_head, h, tgt, temperature, fp32_head, chunk, with_entropy)
    else:
        logp_m, ent_m = full_head(lm.lm_head, h, tgt, temperature, fp32_head, with_entropy)
    zeros = torch.zeros(N * T, dtype=torch.float32, device=hidden.device)
    logp = zeros.index_put((idx,), logp_m.float()).view(N, T)  # [N, T], 0 where not needed
    if not with_entropy:
        return logp
    return logp, zeros.index_put((idx,), ent_m.detach().float()).view(N, T)


def shared_prefix_logprobs(
    model,
    prompt_ids: torch.Tensor,  # [b, P] left-padded, one row per group
    prompt_mask: torch.Tensor,  # [b, P]
    completion_ids: torch.Tensor,  # [n, T] right-padded, the rows of group i consecutive
    completion_mask: torch.Tensor,  # [n, T]
    repeats: torch.Tensor,  # [b] completions per group (sum = n)
    temperature: float = 1.0,
    fp32_head: bool = False,
    with_entropy: bool = False,
    decoder=None,
    chunk: int = 0,
    need: torch.Tensor | None = None,  # [n, T]
):
    """`token_logprobs` with each group's prompt run once, its KV cache (and graph) repeated per row."""
    lm = causal_lm(model)
    dec = decoder if decoder is not None else lm.model
    if any(getattr(m, "gradient_checkpointing", False) for m in lm.model.modules()) and lm.model.training:
        raise ValueError("algo.shared_prefix needs the prompt's KV cache, which transformers' gradient "
                         "checkpointing drops: set model.gradient_checkpointing=false or algo.shared_prefix=false")
    out = decoder_forward(dec, prompt_ids, prompt_mask, position_ids(prompt_mask))
    cache = out.past_key_values
    rows = torch.repeat_interleave(torch.arange(len(repeats), device=prompt_ids.device), repeats)  # [n] group of each row
    cache.batch_select_indices(rows)  # [b, ...] -> [n, ...], differentiable indexing
    T = completion_ids.shape[1]
    first = out.last_hidden_state[:, -1:].index_select(0, rows)  # [n, 1, H] predicts each completion's first token
    if T > 1:
        attn = torch.cat([prompt_mask.index_select(0, rows), completion_mask[:, :-1]], 1)  # [n, P + T-1]
        start = prompt_mask.long().sum(1).index_select(0, rows)[:, None]  # [n, 1] first completion position
        pos = start + torch.arange(T - 1, device=start.device)  # [n, T-1]
        rest = decoder_forward(dec, completion_ids[:, :-1], attn, pos, cache).last_hidden_state  # [n, T-1, H]
        hidden = torch.cat([first, rest], 1)  # [n, T, H]
    else:
        hidden = first
    return head_logprobs(lm, hidden, completion_ids, temperature, fp32_head, with_entropy, chunk, need)
