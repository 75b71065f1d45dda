"""Policy losses for one micro-batch: PPO clip, CISPO, GSPO, plus the k3 KL penalty.

Each registered loss maps (log_ratio, logp, adv, mask, cfg) to a PolicyTerms record; policy_loss
adds the KL term and aggregates with full-batch token weights, so micro-batch losses simply add up."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor

from rlx.algo.config import AlgoConfig


@dataclass
class PolicyTerms:
    per_token: Tensor  # [n, T] policy-gradient loss per token
    ratio: Tensor  # [n, T] or [n, 1] importance ratio the loss used (with grad)
    clipped_low: Tensor  # bool, broadcastable to [n, T]
    clipped_high: Tensor  # bool, broadcastable to [n, T]


def _ppo_clip(ratio: Tensor, adv: Tensor, eps_low: float, eps_high: float) -> PolicyTerms:
    # adv [n, 1]; ratio [n, T] (token) or [n, 1] (sequence)
    clipped = ratio.clamp(1.0 - eps_low, 1.0 + eps_high)
    per_token = -torch.min(ratio * adv, clipped * adv)
    low = (ratio < 1.0 - eps_low) & (adv < 0)
    high = (ratio > 1.0 + eps_high) & (adv > 0)
    return PolicyTerms(per_token, ratio, low, high)


def ppo_clip_loss(log_ratio: Tensor, logp: Tensor, adv: Tensor, mask: Tensor, cfg: AlgoConfig) -> PolicyTerms:
    """-min(r A, clip(r, 1 - eps_low, 1 + eps_high) A), token-level ratio r = exp(logp - old_logp)."""
    return _ppo_clip(torch.exp(log_ratio), adv, cfg.eps_low, cfg.eps_high)


def gspo_loss(log_ratio: Tensor, logp: Tensor, adv: Tensor, mask: Tensor, cfg: AlgoConfig) -> PolicyTerms:
    """PPO clip on the sequence ratio s = exp(masked mean of token log-ratios), gspo_eps_low/high."""
    seq_log_ratio = (log_ratio * mask).sum(-1, keepdim=True) / mask.sum(-1, keepdim=True).clamp(min=1)  # [n, 1]
    terms = _ppo_clip(torch.exp(seq_log_ratio), adv, cfg.gspo_eps_low, cfg.gspo_eps_high)
    terms.per_token = terms.per_token.expand_as(log_ratio)  # [n, T]
    return terms


def cispo_loss(log_ratio: Tensor, logp: Tensor, adv: Tensor, mask: Tensor, cfg: AlgoConfig) -> PolicyTerms:
    """-sg(min(r, eps_max)) A logp: truncated IS weight with an absolute cap, no lower clip."""
    ratio = torch.exp(log_ratio)
    weight = ratio.clamp(max=cfg.eps_max).detach()
    per_token = -weight * adv * logp
    high = ratio > cfg.eps_max  # truncation changes the gradient whatever the sign of A
    return PolicyTerms(per_token, ratio, torch.zeros_like(high), high)


LOSSES: dict[str, Callable[[Tensor, Tensor, Tensor, Tensor, AlgoConfig], PolicyTerms]] = {
    "ppo_clip": ppo_clip_loss,
    "gspo": gspo_loss,
    "cispo": cispo_loss,
}


def k3_kl(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """k3 estimator of KL(pi || ref) per token: exp(ref - logp) - (ref - logp) - 1 (>= 0)."""
    delta = ref_logp - logp
    return torch.exp(delta) - delta - 1.0


def token_entropy(logits: Tensor) -> Tensor:
    """Entropy of the next-token distribution [n, T] from logits [n, T, V] (computed in float32)."""
    logits = logits.float()
    return torch.logsumexp(logits, -1) - (torch.softmax(logits, -1) * logits).sum(-1)


def _masked_mean(x: Tensor, mask: Tensor) -> float:
    return float((x.float() * mask).sum() / mask.sum().clamp(min=1))


def _check_inputs(logp, old_logp, adv, weights, mask, cfg: AlgoConfig, ref_logp) -> None:
    """The tensors' shapes agree, and a KL term has its reference log-probs."""
    if logp.dim() != 2 or old_logp.shape != logp.shape or mask.shape != logp.shape or weights.shape != logp.shape:
        raise ValueError(f"logp, old_logp, mask, weights must share one [n, T] shape; got {tuple(logp.shape)}, "
                         f"{tuple(old_logp.shape)}, {tuple(mask.shape)}, {tuple(weights.shape)}")
    if adv.shape != logp.shape[:1]:
        raise ValueError(f"adv must be [n] = {tuple(logp.shape[:1])}, got {tuple(adv.shape)}")
    if cfg.beta != 0.0 and ref_logp is None:
        raise ValueError("algo.beta != 0 needs ref_logp (log-probs of the policy with adapters disabled)")


def policy_loss(logp: Tensor, old_logp: Tensor, adv: Tensor, weights: Tensor, mask: Tensor, cfg: AlgoConfig,
                ref_logp: Tensor | None = None, is_weight: Tensor | None = None) -> tuple[Tensor, dict[str, float]]:
    """Loss of one micro-batch = sum(weights * (pg + beta * kl)) and token-mean metrics.
    logp [n, T] (requires grad), old_logp / ref_logp [n, T], adv [n], weights / mask [n, T].
    Weights come from token_weights on the full batch, so micro-batch losses add up to the full loss.
    With cfg.kl_times_ratio (TRL's default use_bias_correction_kl) the k3 term is multiplied by the
    (non-detached) ratio the loss uses. `is_weight` [n, T] (detached; the rollout correction's importance
    weights against the engine, algo.correction / algo.tis_cap) multiplies the policy-gradient term per token."""
    _check_inputs(logp, old_logp, adv, weights, mask, cfg, ref_logp)
    mask = mask.to(logp.dtype)
    valid = mask > 0
    # zero padded positions first so non-finite padding cannot leak NaN into loss or gradient
    logp_v = torch.where(valid, logp, torch.zeros_like(logp))  # [n, T]
    log_ratio = torch.where(valid, logp - old_logp.to(logp.dtype), torch.zeros_like(logp))  # [n, T]
    terms = LOSSES[cfg.loss](log_ratio, logp_v, adv.to(logp.dtype).unsqueeze(-1), mask, cfg)

    per_token = terms.per_token
    metrics: dict[str, float] = {}
    if is_weight is not None:
        w = torch.where(valid, is_weight.detach().to(logp.dtype), torch.zeros_like(logp))  # [n, T]
        per_token = per_token * w
        metrics["actor/tis_weight/mean"] = _masked_mean(w, mask)
        metrics["actor/tis_weight/max"] = float(w[valid].max()) if bool(valid.any()) else 0.0
    if ref_logp is not None:
        kl = k3_kl(logp_v, torch.where(valid, ref_logp.to(logp.dtype), torch.zeros_like(logp)))  # [n, T]
        if cfg.kl_times_ratio:  # importance-weighted k3: samples come from the old policy
            kl = kl * terms.ratio
        metrics["actor/kl"] = _masked_mean(kl.detach(), mask)  # the KL term as it enters the loss (before beta)
        if cfg.beta != 0.0:
            per_token = per_token + cfg.beta * kl
    loss = (weights.to(logp.dtype) * mask * per_token).sum()

    with torch.no_grad():
        ratio = terms.ratio.detach().expand_as(logp)
        low = terms.clipped_low.expand_as(logp).float()
        high = terms.clipped_high.expand_as(logp).float()
        metrics["actor/pg_loss"] = _masked_mean(terms.per_token.detach(), mask)
        metrics["actor/clip_frac"] = _masked_mean(torch.maximum(low, high), mask)
        metrics["actor/clip_frac/low"] = _masked_mean(low, mask)
        metrics["actor/clip_frac/high"] = _masked_mean(high, mask)
        metrics["actor/ratio/mean"] = _masked_mean(ratio, mask)
        metrics["actor/ratio/max"] = float(ratio[valid].max()) if bool(valid.any()) else 0.0
    return loss, metrics
