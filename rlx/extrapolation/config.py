"""The `extrapolation.*` schema (NExt predict-extend, linear baseline); registered by rlx.config."""

from dataclasses import dataclass, field


@dataclass
class ExtrapolationConfig:
    """Jump ahead along the LoRA trajectory (NExt). `type`: none | linear | next.

    Steps are counts of completed RL (optimizer) steps. `extend_at` steps must be multiples of
    `interval`, and `horizon` a multiple of `interval`. See docs/extrapolation.md.
    """

    type: str = field(
        default="none",
        metadata={"help": "none | linear | next (predict-extend jumps of the LoRA adapter)"},
    )
    interval: int = field(
        default=10,
        metadata={"help": "record every `interval` steps (next only)"},
    )
    horizon: int = field(
        default=50,
        metadata={"help": "predict the update over the next `horizon` steps (next only)"},
    )
    extend_at: list[int] = field(
        default_factory=list,
        metadata={"help": "steps at which to predict-extend"},
    )
    alpha: float = field(
        default=1.5,
        metadata={"help": "next: W += alpha * dW_pred;  linear: W = W0 + alpha * (W_s - W0)"},
    )
    hidden: int = field(
        default=256,
        metadata={"help": "predictor (next only): one per vector-length bucket, paper sizes"},
    )
    epochs: int = field(
        default=1000,
        metadata={"help": "full-batch epochs per predictor training (one training per jump)"},
    )
    lr: float = field(
        default=1e-4,
        metadata={"help": "AdamW peak lr, cosine-decayed to lr * min_lr_ratio (paper 2e-5; see docs)"},
    )
    min_lr_ratio: float = field(
        default=0.1,
        metadata={"help": "predictor lr decays to lr * min_lr_ratio"},
    )
    weight_decay: float = field(
        default=0.01,
        metadata={"help": "predictor AdamW weight decay"},
    )
    seed: int = field(
        default=0,
        metadata={"help": "predictor init seed (the global RNG is never touched)"},
    )
    reset_optimizer: bool = field(
        default=True,
        metadata={"help": "drop the Adam state of the LoRA params after a jump"},
    )
    adapter: str = field(
        default="default",
        metadata={"help": "PEFT adapter name"},
    )
    store_on_cpu: bool = field(
        default=False,
        metadata={"help": "keep adapter snapshots (initial + window) in host memory"},
    )
