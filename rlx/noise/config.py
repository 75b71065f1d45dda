"""The `noise.*` schema (AQN); registered by rlx.config."""

from dataclasses import dataclass, field


@dataclass
class NoiseConfig:
    """Adaptive Quantization Noise (QeRL). `type` is a registered name: none | aqn. See docs/noise.md."""

    type: str = "none"  # none | aqn (adaptive quantization noise on RMSNorm weights)
    schedule: str = "exponential"  # exponential | linear | cosine | constant (rlx.noise.SCHEDULES)
    sigma_start: float = 1e-2  # sigma of stage 1 (of every step for `constant`)
    sigma_end: float = 5e-4  # sigma of the last stage K-1
    stages: int = 10  # K equal intervals of the run; interval 0 is noise-free (except `constant`)
    # norm modules inside each decoder block, by path suffix (PEFT prefixes do not matter)
    targets: list[str] = field(default_factory=lambda: ["input_layernorm", "post_attention_layernorm"])
    include_final_norm: bool = False  # also perturb the final `...norm` outside the blocks
    apply_in_train_forward: bool = False  # the training forward+backward of step s also runs under step s's noise
