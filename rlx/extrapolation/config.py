"""The `extrapolation.*` schema and every check of a single value (`__post_init__`, run by rlx.config.preflight);
the jump steps against train.steps are checked where the extrapolator is built (rlx.extrapolation.extrapolator)."""

import math
from dataclasses import dataclass, field

TYPES = ("none", "linear", "next")  # rlx.extrapolation.EXTRAPOLATORS and "none"


@dataclass
class ExtrapolationConfig:
    """Jump ahead along the LoRA trajectory (NExt); steps count completed RL steps. See docs/extrapolation.md."""

    type: str = field(default="none", metadata={
        "help": "none | linear | next (predict-extend jumps of the LoRA adapter)"})
    interval: int = field(default=10, metadata={"help": "record every `interval` steps (next only)"})
    horizon: int = field(default=50, metadata={"help": "predict the update over the next `horizon` steps (next only)"})
    extend_at: list[int] = field(default_factory=list, metadata={"help": "steps at which to predict-extend"})
    alpha: float = field(default=1.5, metadata={
        "help": "next: W += alpha * dW_pred;  linear: W = W0 + alpha * (W_s - W0)"})
    hidden: int = field(default=256, metadata={
        "help": "predictor (next only): one per vector-length bucket, paper sizes"})
    epochs: int = field(default=1000, metadata={
        "help": "full-batch epochs per predictor training (one training per jump)"})
    lr: float = field(default=1e-4, metadata={
        "help": "AdamW peak lr, cosine-decayed to lr * min_lr_ratio (paper 2e-5; see docs)"})
    min_lr_ratio: float = field(default=0.1, metadata={"help": "predictor lr decays to lr * min_lr_ratio"})
    weight_decay: float = field(default=0.01, metadata={"help": "predictor AdamW weight decay"})
    seed: int = field(default=0, metadata={"help": "predictor init seed (the global RNG is never touched)"})
    reset_optimizer: bool = field(default=True, metadata={
        "help": "drop the Adam state of the LoRA params after a jump"})
    adapter: str = field(default="default", metadata={"help": "PEFT adapter name"})
    store_on_cpu: bool = field(default=False, metadata={
        "help": "keep adapter snapshots (initial + window) in host memory"})
    fit_cache: str | None = field(default=None, metadata={
        "help": "next: a folder of fitted predictors keyed by everything a fit depends on; runs whose records agree up "
                "to a jump (an alpha sweep at one seed) train it once (fit_cache.py)"})

    def __post_init__(self) -> None:
        if self.type not in TYPES:
            raise ValueError(f"extrapolation.type must be one of {', '.join(TYPES)}; got {self.type!r}")
        if self.type == "none":
            return
        if not self.extend_at:
            raise ValueError(f"extrapolation.type={self.type} needs at least one step in extrapolation.extend_at")
        if not math.isfinite(float(self.alpha)):
            raise ValueError(f"extrapolation.alpha must be finite, got {self.alpha}")
        if self.type == "next":
            _check_next(self)


def _check_next(cfg: ExtrapolationConfig) -> None:
    """NExt's record spacing, horizon, jump steps and predictor settings."""
    interval, horizon = int(cfg.interval), int(cfg.horizon)
    if interval < 1 or horizon < interval or horizon % interval:
        raise ValueError(f"extrapolation: need interval >= 1 and horizon a multiple of interval, got {interval}, {horizon}")
    off = sorted(s for s in set(cfg.extend_at) if s % interval)
    if off:
        raise ValueError(f"extrapolation.extend_at steps {off} are not multiples of interval={interval}")
    if min(cfg.extend_at) < horizon:
        raise ValueError(f"extrapolation: first extend step {min(cfg.extend_at)} < horizon {horizon}: no training pair "
                         f"would exist")
    if int(cfg.epochs) < 1 or int(cfg.hidden) < 1 or float(cfg.lr) <= 0 or not 0 <= float(cfg.min_lr_ratio) <= 1:
        raise ValueError(f"extrapolation: bad predictor settings epochs={cfg.epochs} hidden={cfg.hidden} "
                         f"lr={cfg.lr} min_lr_ratio={cfg.min_lr_ratio}")
