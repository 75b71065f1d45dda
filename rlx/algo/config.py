"""The `algo` config group's schema (AlgoConfig): every knob of the RL objective, validated by rlx.algo.check_config."""

from dataclasses import dataclass, field


@dataclass
class CorrectionConfig:
    """Rollout correction against the engine's log-probs (rlx.algo.correction): an importance weight
    rho per token, taken at `level`, then truncated and/or masked. Off by default."""

    # off | token (rho_t = pi/mu per token) | sequence (product over the completion) | geometric (its per-token mean)
    level: str = "off"
    action: str = "truncate"  # truncate (weight min(rho, cap)) | mask (weight rho, 0 outside [lo, hi]) | both
    cap: float = 2.0  # truncate: the upper cap C on the weight (>= 1)
    lo: float = 0.5  # mask: lower bound of the kept rho (<= 1; 0 = none)
    hi: float = 2.0  # mask: upper bound of the kept rho (>= 1, finite)


@dataclass
class AlgoConfig:
    """The RL objective: each field is an independent knob; conf/algo/*.yaml are named presets."""

    name: str = "grpo"  # preset name (conf/algo/<name>.yaml)
    # policy loss: ppo_clip | cispo | gspo
    loss: str = "ppo_clip"
    eps_low: float = 0.2  # PPO clip: lower range (ratio >= 1 - eps_low)
    eps_high: float = 0.2  # PPO clip: upper range (ratio <= 1 + eps_high; DAPO clip-higher 0.28)
    eps_max: float = 5.0  # CISPO absolute cap on the (detached) importance weight
    gspo_eps_low: float = 3e-4  # GSPO sequence-ratio lower clip
    gspo_eps_high: float = 4e-4  # GSPO sequence-ratio upper clip
    # aggregation: token | sample | prompt | constant
    aggregation: str = "sample"
    # advantages: group | batch | none  (normalization of reward - group mean)
    adv_norm: str = "group"
    adv_eps: float = 1e-4  # added to the std when normalizing advantages
    # KL to the reference policy (adapters disabled), k3 estimator
    beta: float = 0.0
    kl_times_ratio: bool = True  # multiply k3 by the IS ratio (TRL's use_bias_correction_kl default)
    # batch shaping
    dynamic_sampling: bool = False  # DAPO: refill until every group has reward variance
    max_resample_rounds: int = 3  # dynamic sampling: refill rounds at most
    zero_variance_filter: bool = False  # ScaleRL: drop zero-variance groups, no refill
    no_positive_resampling: bool = False  # retire prompts whose pass rate >= threshold
    pass_rate_threshold: float = 0.9  # no-positive-resampling retires prompts at this pass rate
    overlong_shaping: bool = False  # DAPO soft overlong punishment
    overlong_max_len: int = 0  # L_max (0 => rollout.max_new_tokens)
    overlong_cache: int = 4  # L_cache
    mask_truncated: bool = False  # drop truncated completions from the loss
    tis_cap: float = 0.0  # truncated importance sampling vs the rollout's log-probs, cap C (0 = off)
    # rollout correction (token / sequence / geometric weights, truncate / mask); tis_cap > 0 is its token-truncate case
    correction: CorrectionConfig = field(default_factory=CorrectionConfig)
    # every N steps split the trainer-vs-engine log-ratio into an engine and a staleness part (0 = off)
    mismatch_split_every: int = 0
    fp32_lm_head: bool = False  # logits in float32 for training log-probs and rollout sampling
    # optimisation
    lr: float = 1e-3  # AdamW peak learning rate (>= 0)
    weight_decay: float = 0.0  # AdamW weight decay (>= 0)
    grad_clip: float = 1.0  # max gradient norm (> 0)
    warmup_steps: int = 0  # linear learning-rate warm-up steps
    mu: int = 1  # optimizer steps per rollout batch
    micro_batch_size: int = 64  # sequences per forward/backward at most
    trim_padding: bool = False  # sort rows by length; each micro-batch computes only its own longest row
    # > 0: rows sorted by length and binned into micro-batches of at most this many padded tokens, each cut
    # to its own longest row (0 = fixed blocks of micro_batch_size rows over the batch's full width)
    micro_batch_tokens: int = 8192
    shared_prefix: bool = False  # run each group's prompt once; its completions attend to its KV cache
    # > 0: LM head over this many tokens at a time, only where the loss reads it: no [N, T, V] logits (0 = all at once)
    logprob_chunk: int = 1024
    # rows with zero advantage and no KL term (zero-variance groups) run forward only: their loss term is 0,
    # so the gradient is the same; their log-probs (computed without grad: float noise) still feed the
    # metrics (one process; with micro_batch_tokens or shared_prefix). Off by default: on, one process and
    # N ranks agree only to float noise
    forward_only_zero_adv: bool = False
