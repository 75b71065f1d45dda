"""Rollout correction: importance weights of the trainer against the rollout engine, and the mismatch metrics.

rho = pi / mu between the trainer's pre-update log-probs (pi, `first_logp`) and the engine's (mu), per token, per
sequence (exp(sum_t log rho_t)) or geometric (exp(mean_t log rho_t)); truncated (TIS), masked (icepop) or both;
masked tokens stay in the normalizers, scaling the step down. `mismatch_metrics` runs every step (docs/engine.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from rlx.algo.config import CorrectionConfig

# sequence / geometric log-weights are clamped before exp: a long completion's summed log-ratio would overflow
# float32 (token weights are not clamped: tis_cap stays bit-identical)
SAFE_LOG = 20.0
QUANTILES = (("p05", 0.05), ("p25", 0.25), ("p50", 0.5), ("p75", 0.75), ("p95", 0.95))


def resolve(a) -> CorrectionConfig | None:
    """The correction to apply (None when off): `algo.tis_cap > 0` is token truncate, else `algo.correction`."""
    if a.tis_cap > 0:
        return CorrectionConfig(level="token", action="truncate", cap=float(a.tis_cap))
    return None if a.correction.level == "off" else a.correction


@dataclass
class Weights:
    log_rho: Tensor  # [n, T] log rho at the level (one value along a row at the sequence levels)
    rho: Tensor  # [n, T] exp(log_rho), before truncation or masking
    weight: Tensor  # [n, T] the weight the loss applies (detached)
    keep: Tensor  # [n, T] bool: rho inside [lo, hi] (all True without masking)


def level_log_ratio(first_logp: Tensor, rollout_logp: Tensor, mask: Tensor, level: str) -> Tensor:
    """log rho at `level`, broadcast over the row's tokens. Rows must be whole (micro-batches are).  # [n, T]"""
    valid = mask > 0
    d = torch.where(valid, first_logp - rollout_logp, torch.zeros_like(first_logp))  # [n, T]
    if level == "token":
        return d
    s = d.sum(-1, keepdim=True)  # [n, 1]
    if level == "geometric":
        s = s / valid.sum(-1, keepdim=True).clamp(min=1)
    return s.expand_as(d)


def correction_weights(first_logp: Tensor, rollout_logp: Tensor, mask: Tensor, corr: CorrectionConfig) -> Weights:
    """The correction's per-token weights for whole rows.  # [n, T] each"""
    with torch.no_grad():
        log_rho = level_log_ratio(first_logp.float(), rollout_logp.float(), mask, corr.level)
        rho = torch.exp(log_rho if corr.level == "token" else log_rho.clamp(max=SAFE_LOG))
        weight = rho.clamp(max=corr.cap) if corr.action in ("truncate", "both") else rho
        keep = torch.ones_like(log_rho, dtype=torch.bool)
        if corr.action in ("mask", "both"):
            lo = math.log(corr.lo) if corr.lo > 0 else -math.inf
            keep = (log_rho >= lo) & (log_rho <= math.log(corr.hi))
            weight = torch.where(keep, weight, torch.zeros_like(weight))
    return Weights(log_rho, rho, weight, keep)


def logprob_diff(trainer_logp: torch.Tensor, rollout_logp: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """Trainer-vs-rollout mismatch over completion tokens: mean and max |diff| of log-probs.  # [N, T] each"""
    valid = mask > 0
    if not bool(valid.any()):
        return {}
    d = (trainer_logp.float() - rollout_logp.float()).abs()[valid]
    return {"rollout/logprob_diff/mean": d.mean().item(), "rollout/logprob_diff/max": d.max().item()}


def k3(d: Tensor) -> Tensor:
    """r - 1 - log r for log-ratios d, in float64 with expm1: at float-noise mismatch (d ~ 1e-7) the float32
    exp(d) - d - 1 cancels to noise of either sign, while the value is d^2 / 2 >= 0."""
    d = d.double()
    return torch.expm1(d) - d


def _seq_metrics(d: Tensor, valid: Tensor) -> dict[str, float]:
    """Sequence-level KL and the quantiles of the summed log-ratio over rows with a completion token."""
    rows = valid.any(-1)  # [N]
    s = d.sum(-1)[rows].double()  # [R] log pi(y) - log mu(y)
    m = {"rollout_corr/kl_seq": float((-s).mean()),  # k1 of KL(mu || pi) over whole completions
         # k3 of the sequence ratio (exp capped at e^80 to stay finite in a log; unbiased below it)
         "rollout_corr/k3_kl_seq": float(k3(s.clamp(max=80.0)).mean())}
    q = torch.quantile(s, torch.tensor([p for _, p in QUANTILES], dtype=s.dtype, device=s.device))
    for (name, _), v in zip(QUANTILES, q.tolist()):
        m[f"rollout_corr/seq_log_ratio/{name}"] = v
    m["rollout_corr/seq_log_ratio/min"], m["rollout_corr/seq_log_ratio/max"] = float(s.min()), float(s.max())
    return m


def mismatch_metrics(first_logp: Tensor, rollout_logp: Tensor, mask: Tensor,
                     corr: CorrectionConfig | None) -> dict[str, float]:
    """Trainer (pi) vs engine (mu) over the completion tokens of the batch, and what the correction did.
    KL(mu || pi) from samples of mu: k1 = mean(log mu - log pi), k3 = mean(r - 1 - log r), r = pi / mu.  # [N, T] each"""
    valid = mask > 0
    if not bool(valid.any()):
        return {}
    d = torch.where(valid, first_logp.float() - rollout_logp.float(), torch.zeros_like(first_logp, dtype=torch.float))
    dv = d[valid]  # [n_tok]
    m = logprob_diff(first_logp, rollout_logp, mask)  # rlx's (verl's rollout_probs_diff) names ...
    m["sampling/sampling_logp_difference/mean"] = m["rollout/logprob_diff/mean"]  # ... and TRL's, the same values
    m["sampling/sampling_logp_difference/max"] = m["rollout/logprob_diff/max"]
    m.update({"rollout_corr/kl": float((-dv.double()).mean()), "rollout_corr/k3_kl": float(k3(dv).mean())})
    m.update(_seq_metrics(d, valid))
    w = correction_weights(first_logp, rollout_logp, mask, corr or CorrectionConfig(level="token"))
    rows = valid.any(-1)
    rho, weight = w.rho[valid], (w.weight[valid] if corr is not None else torch.ones_like(dv))
    keep = w.keep if corr is not None else torch.ones_like(valid)
    m.update({"rollout_corr/rollout_is_mean": float(rho.mean()), "rollout_corr/rollout_is_min": float(rho.min()),
              "rollout_corr/rollout_is_max": float(rho.max()),  # rho at the level, before truncation or masking
              "rollout_corr/weight_mean": float(weight.mean()), "rollout_corr/weight_max": float(weight.max()),
              "rollout_corr/rollout_is_masked_fraction": float((~keep[valid]).float().mean()),
              "rollout_corr/rollout_is_seq_masked_fraction": float((~keep & valid).any(-1)[rows].float().mean()),
              "rollout_corr/truncated_fraction": float((rho > corr.cap).float().mean())
              if corr is not None and corr.action in ("truncate", "both") else 0.0,
              "sampling/importance_sampling_ratio/min": float(weight.min()),  # the weights the loss applied
              "sampling/importance_sampling_ratio/mean": float(weight.mean()),
              "sampling/importance_sampling_ratio/max": float(weight.max())})
    return m
