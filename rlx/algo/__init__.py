"""The RL objective (advantages, aggregation, losses, shaping, curriculum), the update, data parallel, completions."""

from rlx.algo.advantages import ADV_NORMS, compute_advantages, group_mean_std
from rlx.algo.aggregation import AGGREGATIONS, token_weights
from rlx.algo.config import AlgoConfig, CorrectionConfig, as_config
from rlx.algo.correction import correction_weights, logprob_diff, mismatch_metrics
from rlx.algo.mismatch import mismatch_split
from rlx.algo.curriculum import PassRateCurriculum
from rlx.algo.losses import LOSSES, k3_kl, policy_loss, token_entropy
from rlx.algo.shaping import Shaped, Shaping, mask_truncated, overlong_penalty, shape_batch, zero_variance_groups
from rlx.algo.policy_update import Update


def check_config(cfg) -> None:
    """Raise ValueError naming the bad field if an algo config (AlgoConfig, `algo` node or dict) cannot run."""
    if isinstance(cfg, AlgoConfig):
        cfg.check()
    else:
        as_config(cfg)


__all__ = ["AlgoConfig", "CorrectionConfig", "correction_weights", "mismatch_metrics", "mismatch_split", "Shaped",
           "logprob_diff", "shape_batch", "Update", "Shaping", "as_config", "PassRateCurriculum", "check_config",
           "compute_advantages", "group_mean_std", "k3_kl", "mask_truncated", "overlong_penalty", "policy_loss",
           "token_entropy", "token_weights", "zero_variance_groups"]
