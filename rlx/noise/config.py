"""The `noise.*` schema (AQN); registered by rlx.config."""

from dataclasses import dataclass, field


@dataclass
class NoiseConfig:
    """Adaptive Quantization Noise (QeRL). `type` is a registered name: none | aqn. See docs/noise.md."""

    type: str = field(
        default="none",
        metadata={"help": "none | aqn (adaptive quantization noise on RMSNorm weights)"},
    )
    schedule: str = field(
        default="exponential",
        metadata={"help": "exponential | linear | cosine | constant (rlx.noise.SCHEDULES)"},
    )
    sigma_start: float = field(
        default=1e-2,
        metadata={"help": "sigma of stage 1 (of every step for `constant`)"},
    )
    sigma_end: float = field(
        default=5e-4,
        metadata={"help": "sigma of the last stage K-1"},
    )
    stages: int = field(
        default=10,
        metadata={"help": "K equal intervals of the run; interval 0 is noise-free (except `constant`)"},
    )
    targets: list[str] = field(
        default_factory=lambda: ["input_layernorm", "post_attention_layernorm"],
        metadata={"help": "norm modules inside each decoder block, by path suffix (PEFT prefixes do not matter)"},
    )
    include_final_norm: bool = field(
        default=False,
        metadata={"help": "also perturb the final `...norm` outside the blocks"},
    )
    apply_in_train_forward: bool = field(
        default=False,
        metadata={"help": "the training forward+backward of step s also runs under step s's noise"},
    )
