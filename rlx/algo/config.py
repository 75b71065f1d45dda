"""The `algo` config group's schema (AlgoConfig) and every check of a single value: `__post_init__` runs `check()`
when rlx.config.preflight converts the composed config, so the functions that read it trust it (rules that
relate algo to another group are preflight's)."""

import math
from dataclasses import dataclass, field, fields

# the registries' names (losses.LOSSES, ...), here as those modules import this one (test_algo_config keeps them equal)
LOSSES = ("cispo", "gspo", "ppo_clip")  # algo.loss
AGGREGATIONS = ("constant", "prompt", "sample", "token")  # algo.aggregation
ADV_NORMS = ("batch", "group", "none")  # algo.adv_norm
LEVELS = ("off", "token", "sequence", "geometric")  # algo.correction.level
ACTIONS = ("truncate", "mask", "both")  # algo.correction.action


@dataclass
class CorrectionConfig:
    """Rollout correction against the engine's log-probs (rlx.algo.correction); off by default."""

    level: str = field(default="off", metadata={
        "help": "off | token (rho_t = pi/mu per token) | sequence (product over the completion) | geometric (its "
                "per-token mean)"})
    action: str = field(default="truncate", metadata={
        "help": "truncate (weight min(rho, cap)) | mask (weight rho, 0 outside [lo, hi]) | both"})
    cap: float = field(default=2.0, metadata={"help": "truncate: the upper cap C on the weight (>= 1)"})
    lo: float = field(default=0.5, metadata={"help": "mask: lower bound of the kept rho (<= 1; 0 = none)"})
    hi: float = field(default=2.0, metadata={"help": "mask: upper bound of the kept rho (>= 1, finite)"})

    def check(self) -> None:
        """Raise ValueError naming the key (algo.tis_cap's own record, cap maybe below 1, is not checked)."""
        if self.level not in LEVELS:
            raise ValueError(f"unknown algo.correction.level {self.level!r}; choose one of {list(LEVELS)}")
        if self.action not in ACTIONS:
            raise ValueError(f"unknown algo.correction.action {self.action!r}; choose one of {list(ACTIONS)}")
        # the bounds keep rho = 1 (on-policy, equal numerics) untouched: the correction is then the identity
        if not 1.0 <= self.cap < math.inf:
            raise ValueError(f"algo.correction.cap must be >= 1 and finite, got {self.cap}")
        if not 0.0 <= self.lo <= 1.0:
            raise ValueError(f"algo.correction.lo must be in [0, 1], got {self.lo}")
        if not 1.0 <= self.hi < math.inf:
            raise ValueError(f"algo.correction.hi must be >= 1 and finite, got {self.hi}")


@dataclass
class AlgoConfig:
    """The RL objective: each field is an independent knob; conf/algo/*.yaml are named presets."""

    name: str = field(default="grpo", metadata={"help": "preset name (conf/algo/<name>.yaml)"})
    loss: str = field(default="ppo_clip", metadata={"help": "policy loss: ppo_clip | cispo | gspo"})
    eps_low: float = field(default=0.2, metadata={"help": "PPO clip: lower range (ratio >= 1 - eps_low)"})
    eps_high: float = field(default=0.2, metadata={
        "help": "PPO clip: upper range (ratio <= 1 + eps_high; DAPO clip-higher 0.28)"})
    eps_max: float = field(default=5.0, metadata={"help": "CISPO absolute cap on the (detached) importance weight"})
    gspo_eps_low: float = field(default=3e-4, metadata={"help": "GSPO sequence-ratio lower clip"})
    gspo_eps_high: float = field(default=4e-4, metadata={"help": "GSPO sequence-ratio upper clip"})
    aggregation: str = field(default="sample", metadata={"help": "aggregation: token | sample | prompt | constant"})
    adv_norm: str = field(default="group", metadata={
        "help": "advantages: group | batch | none  (normalization of reward - group mean)"})
    adv_eps: float = field(default=1e-4, metadata={"help": "added to the std when normalizing advantages"})
    beta: float = field(default=0.0, metadata={"help": "KL to the reference policy (adapters disabled), k3 estimator"})
    kl_times_ratio: bool = field(default=True, metadata={
        "help": "multiply k3 by the IS ratio (TRL's use_bias_correction_kl default)"})
    # batch shaping
    dynamic_sampling: bool = field(default=False, metadata={
        "help": "DAPO: refill until every group has reward variance"})
    max_resample_rounds: int = field(default=3, metadata={"help": "dynamic sampling: refill rounds at most"})
    zero_variance_filter: bool = field(default=False, metadata={
        "help": "ScaleRL: drop zero-variance groups, no refill"})
    no_positive_resampling: bool = field(default=False, metadata={
        "help": "retire prompts whose pass rate >= threshold"})
    pass_rate_threshold: float = field(default=0.9, metadata={
        "help": "no-positive-resampling retires prompts at this pass rate"})
    overlong_shaping: bool = field(default=False, metadata={"help": "DAPO soft overlong punishment"})
    overlong_max_len: int = field(default=0, metadata={"help": "L_max (0 => rollout.max_new_tokens)"})
    overlong_cache: int = field(default=4, metadata={"help": "L_cache"})
    mask_truncated: bool = field(default=False, metadata={"help": "drop truncated completions from the loss"})
    tis_cap: float = field(default=0.0, metadata={
        "help": "truncated importance sampling vs the rollout's log-probs, cap C (0 = off)"})
    correction: CorrectionConfig = field(default_factory=CorrectionConfig, metadata={
        "help": "rollout correction (token / sequence / geometric weights, truncate / mask); tis_cap > 0 is its "
                "token-truncate case"})
    mismatch_split_every: int = field(default=0, metadata={
        "help": "every N steps split the trainer-vs-engine log-ratio into an engine and a staleness part (0 = off)"})
    fp32_lm_head: bool = field(default=False, metadata={
        "help": "logits in float32 for training log-probs and rollout sampling"})
    # optimisation
    lr: float = field(default=1e-3, metadata={"help": "AdamW peak learning rate (>= 0)"})
    weight_decay: float = field(default=0.0, metadata={"help": "AdamW weight decay (>= 0)"})
    grad_clip: float = field(default=1.0, metadata={"help": "max gradient norm (> 0)"})
    warmup_steps: int = field(default=0, metadata={"help": "linear learning-rate warm-up steps"})
    mu: int = field(default=1, metadata={"help": "optimizer steps per rollout batch"})
    micro_batch_size: int = field(default=64, metadata={"help": "sequences per forward/backward at most"})
    trim_padding: bool = field(default=False, metadata={
        "help": "sort rows by length; each micro-batch computes only its own longest row"})
    micro_batch_tokens: int = field(default=8192, metadata={
        "help": "> 0: rows sorted by length and binned into micro-batches of at most this many padded tokens, each cut "
                "to its own longest row (0 = fixed blocks of micro_batch_size rows over the batch's full width)"})
    shared_prefix: bool = field(default=False, metadata={
        "help": "run each group's prompt once; its completions attend to its KV cache"})
    logprob_chunk: int = field(default=1024, metadata={
        "help": "> 0: LM head over this many tokens at a time, only where the loss reads it: no [N, T, V] logits (0 = "
                "all at once)"})
    forward_only_zero_adv: bool = field(default=False, metadata={
        "help": "rows with zero advantage and no KL term (zero-variance groups) run forward only: their loss term is "
                "0, so the gradient is the same; their log-probs (computed without grad: float noise) still feed the "
                "metrics (one process; with micro_batch_tokens or shared_prefix). Off by default: on, one process and "
                "N ranks agree only to float noise"})

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """Raise ValueError naming the bad field. Written as `not x >= 0` so that a NaN fails too."""
        for name, registry in (("loss", LOSSES), ("aggregation", AGGREGATIONS), ("adv_norm", ADV_NORMS)):
            if getattr(self, name) not in registry:
                raise ValueError(f"unknown algo.{name} {getattr(self, name)!r}; choose one of {sorted(registry)}")
        for name in ("eps_low", "eps_high", "gspo_eps_low", "gspo_eps_high"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"algo.{name} (a clip range) must be >= 0, got {getattr(self, name)}")
        if not 0 < self.eps_max < math.inf:
            raise ValueError(f"algo.eps_max (CISPO cap) must be > 0 and finite, got {self.eps_max}")
        if not 0 <= self.beta < math.inf:
            raise ValueError(f"algo.beta must be >= 0 and finite, got {self.beta}")
        if not 0 < self.adv_eps < math.inf:
            raise ValueError(f"algo.adv_eps must be > 0 and finite (it keeps a zero-std group's advantages finite), "
                             f"got {self.adv_eps}")
        if self.dynamic_sampling and self.zero_variance_filter:
            raise ValueError("algo.dynamic_sampling (refill) and algo.zero_variance_filter (drop) exclude each other")
        if self.mu < 1 or self.micro_batch_size < 1 or self.max_resample_rounds < 0:
            raise ValueError("algo.mu and algo.micro_batch_size must be >= 1, max_resample_rounds >= 0")
        if self.micro_batch_tokens < 0 or self.logprob_chunk < 0:
            raise ValueError(f"algo.micro_batch_tokens and algo.logprob_chunk must be >= 0 (0 = off), got "
                             f"{self.micro_batch_tokens} and {self.logprob_chunk}")
        if not 0 <= self.tis_cap < math.inf:
            raise ValueError(f"algo.tis_cap must be >= 0 (0 = off) and finite, got {self.tis_cap}")
        _check_correction(self)
        if not 0.0 < self.pass_rate_threshold <= 1.0:
            raise ValueError(f"algo.pass_rate_threshold must be in (0, 1], got {self.pass_rate_threshold}")
        _check_optimiser(self)


def _check_correction(a: AlgoConfig) -> None:
    """algo.correction, its overlap with algo.tis_cap, and algo.mismatch_split_every."""
    a.correction.check()
    if a.correction.level != "off" and a.tis_cap > 0:
        raise ValueError("algo.tis_cap > 0 is the token-truncate correction: set algo.correction.level=off with it, "
                         "or algo.tis_cap=0 and algo.correction.level=token algo.correction.cap=C")
    if not a.mismatch_split_every >= 0:
        raise ValueError(f"algo.mismatch_split_every must be >= 0 (0 = off), got {a.mismatch_split_every}")


def _check_optimiser(a: AlgoConfig) -> None:
    if not 0 <= a.lr <= 1:
        raise ValueError(f"algo.lr must be in [0, 1] (an AdamW step moves each weight by up to lr; 1e38 overflows "
                         f"in the optimizer), got {a.lr}")
    for ok, key, why, value in ((a.weight_decay >= 0, "algo.weight_decay", "must be >= 0", a.weight_decay),
                                (a.grad_clip > 0, "algo.grad_clip", "must be > 0 (the max gradient norm)", a.grad_clip),
                                (a.warmup_steps >= 0, "algo.warmup_steps", "must be >= 0", a.warmup_steps)):
        if not ok:
            raise ValueError(f"{key} {why}; got {value!r}")


def as_config(cfg) -> AlgoConfig:
    """A checked AlgoConfig from an AlgoConfig, the composed `algo` node or a dict; an unknown key is an error."""
    if isinstance(cfg, AlgoConfig):
        return cfg
    given = dict(cfg.items())
    unknown = sorted(set(given) - {f.name for f in fields(AlgoConfig)})
    if unknown:
        raise ValueError(f"unknown algo option(s): {', '.join(f'algo.{k}' for k in unknown)}")
    corr = given.get("correction", {})
    if not isinstance(corr, CorrectionConfig):
        corr = dict(corr.items())
        bad = sorted(set(corr) - {f.name for f in fields(CorrectionConfig)})
        if bad:
            raise ValueError(f"unknown algo.correction option(s): {', '.join(f'algo.correction.{k}' for k in bad)}")
        given["correction"] = CorrectionConfig(**corr)
    return AlgoConfig(**given)
