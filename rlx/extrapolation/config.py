"""The `extrapolation.*` schema (NExt predict-extend, linear baseline); registered by rlx.config."""

from dataclasses import dataclass, field


@dataclass
class ExtrapolationConfig:
    """Jump ahead along the LoRA trajectory (NExt). `type`: none | linear | next.

    Steps are counts of completed RL (optimizer) steps. `extend_at` steps must be multiples of
    `interval`, and `horizon` a multiple of `interval`. See docs/extrapolation.md.
    """

    type: str = "none"  # none | linear | next (predict-extend jumps of the LoRA adapter)
    interval: int = 10  # record every `interval` steps (next only)
    horizon: int = 50  # predict the update over the next `horizon` steps (next only)
    extend_at: list[int] = field(default_factory=list)  # steps at which to predict-extend
    alpha: float = 1.5  # next: W += alpha * dW_pred;  linear: W = W0 + alpha * (W_s - W0)
    # predictor (next only): one per vector-length bucket, paper sizes
    hidden: int = 256
    epochs: int = 1000  # full-batch epochs per predictor training (one training per jump)
    lr: float = 1e-4  # AdamW peak lr, cosine-decayed to lr * min_lr_ratio (paper 2e-5; see docs)
    min_lr_ratio: float = 0.1  # predictor lr decays to lr * min_lr_ratio
    weight_decay: float = 0.01  # predictor AdamW weight decay
    seed: int = 0  # predictor init seed (the global RNG is never touched)
    reset_optimizer: bool = True  # drop the Adam state of the LoRA params after a jump
    adapter: str = "default"  # PEFT adapter name
    store_on_cpu: bool = False  # keep adapter snapshots (initial + window) in host memory
