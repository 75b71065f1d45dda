"""The RL objective: advantages, aggregation weights, policy losses, batch shaping, curriculum."""

import math

from rlx.algo.advantages import ADV_NORMS, compute_advantages, group_mean_std
from rlx.algo.aggregation import AGGREGATIONS, token_weights
from rlx.algo.config import AlgoConfig, CorrectionConfig
from rlx.algo.correction import check_correction, correction_weights, logprob_diff, mismatch_metrics
from rlx.algo.mismatch import mismatch_split
from rlx.algo.curriculum import PassRateCurriculum
from rlx.algo.losses import LOSSES, k3_kl, policy_loss, token_entropy
from rlx.algo.shaping import Shaped, mask_truncated, overlong_penalty, shape_batch, zero_variance_groups
from rlx.algo.policy_update import NonFiniteError, update


def check_config(cfg: AlgoConfig) -> None:
    """Raise ValueError naming the bad field if an algo config cannot run. Written as `not (x >= 0)`:
    a NaN fails it (a comparison with NaN is false, so `x < 0` would let NaN through)."""
    for field, registry in (("loss", LOSSES), ("aggregation", AGGREGATIONS), ("adv_norm", ADV_NORMS)):
        if getattr(cfg, field) not in registry:
            raise ValueError(f"unknown algo.{field} {getattr(cfg, field)!r}; choose one of {sorted(registry)}")
    for name in ("eps_low", "eps_high", "gspo_eps_low", "gspo_eps_high"):
        if not getattr(cfg, name) >= 0:
            raise ValueError(f"algo.{name} (a clip range) must be >= 0, got {getattr(cfg, name)}")
    if not 0 < cfg.eps_max < math.inf:
        raise ValueError(f"algo.eps_max (CISPO cap) must be > 0 and finite, got {cfg.eps_max}")
    if not 0 <= cfg.beta < math.inf:
        raise ValueError(f"algo.beta must be >= 0 and finite, got {cfg.beta}")
    if not 0 < cfg.adv_eps < math.inf:
        raise ValueError(f"algo.adv_eps must be > 0 and finite (it keeps a zero-std group's advantages finite), "
                         f"got {cfg.adv_eps}")
    if cfg.dynamic_sampling and cfg.zero_variance_filter:
        raise ValueError("algo.dynamic_sampling (refill) and algo.zero_variance_filter (drop) exclude each other")
    if cfg.mu < 1 or cfg.micro_batch_size < 1 or cfg.max_resample_rounds < 0:
        raise ValueError("algo.mu and algo.micro_batch_size must be >= 1, max_resample_rounds >= 0")
    if cfg.micro_batch_tokens < 0 or cfg.logprob_chunk < 0:
        raise ValueError(f"algo.micro_batch_tokens and algo.logprob_chunk must be >= 0 (0 = off), got "
                         f"{cfg.micro_batch_tokens} and {cfg.logprob_chunk}")
    if not 0 <= cfg.tis_cap < math.inf:
        raise ValueError(f"algo.tis_cap must be >= 0 (0 = off) and finite, got {cfg.tis_cap}")
    check_correction(cfg)
    if not 0.0 < cfg.pass_rate_threshold <= 1.0:
        raise ValueError(f"algo.pass_rate_threshold must be in (0, 1], got {cfg.pass_rate_threshold}")
    if not 0 <= cfg.lr <= 1:
        raise ValueError(f"algo.lr must be in [0, 1] (an AdamW step moves each weight by up to lr; 1e38 overflows "
                         f"in the optimizer), got {cfg.lr}")


__all__ = [
    "AlgoConfig",
    "CorrectionConfig",
    "correction_weights",
    "mismatch_metrics",
    "mismatch_split",
    "NonFiniteError",
    "Shaped",
    "logprob_diff",
    "shape_batch",
    "update",
    "PassRateCurriculum",
    "check_config",
    "compute_advantages",
    "group_mean_std",
    "k3_kl",
    "mask_truncated",
    "overlong_penalty",
    "policy_loss",
    "token_entropy",
    "token_weights",
    "zero_variance_groups",
]
