"""The `noise.*` schema (AQN) and every check of a single value (`__post_init__`, run by rlx.config.preflight);
the schedule against train.steps is checked where the injector is built (rlx.noise.aqn)."""

import math
from dataclasses import dataclass, field

NOISE_TYPE_NAMES = ("none", "aqn")  # rlx.noise.NOISE_TYPES and "none"
SCHEDULE_NAMES = ("exponential", "linear", "cosine", "constant")  # rlx.noise.schedules.SCHEDULES


@dataclass
class NoiseConfig:
    """Adaptive Quantization Noise (QeRL). `type` is a registered name: none | aqn. See docs/noise.md."""

    type: str = field(default="none", metadata={"help": "none | aqn (adaptive quantization noise on RMSNorm weights)"})
    schedule: str = field(default="exponential", metadata={
        "help": "exponential | linear | cosine | constant (rlx.noise.SCHEDULES)"})
    sigma_start: float = field(default=1e-2, metadata={"help": "sigma of stage 1 (of every step for `constant`)"})
    sigma_end: float = field(default=5e-4, metadata={"help": "sigma of the last stage K-1"})
    stages: int = field(default=10, metadata={
        "help": "K equal intervals of the run; interval 0 is noise-free (except `constant`)"})
    targets: list[str] = field(default_factory=lambda: ["input_layernorm", "post_attention_layernorm"], metadata={
        "help": "norm modules inside each decoder block, by path suffix (PEFT prefixes do not matter)"})
    include_final_norm: bool = field(default=False, metadata={
        "help": "also perturb the final `...norm` outside the blocks"})
    apply_in_train_forward: bool = field(default=False, metadata={
        "help": "the training forward+backward of step s also runs under step s's noise"})

    def __post_init__(self) -> None:
        if self.type not in NOISE_TYPE_NAMES:
            raise ValueError(f"unknown noise.type '{self.type}'; choose one of {sorted(NOISE_TYPE_NAMES)}")
        if self.type == "none":  # nothing reads the schedule (as before: the injector checked it when built)
            return
        if self.schedule not in SCHEDULE_NAMES:
            raise ValueError(f"unknown noise.schedule '{self.schedule}'; choose one of {sorted(SCHEDULE_NAMES)}")
        for name in ("sigma_start", "sigma_end"):
            value = float(getattr(self, name))
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"noise.{name} must be a finite number >= 0, got {value}")
        if self.schedule == "exponential" and (self.sigma_start <= 0 or self.sigma_end <= 0):
            raise ValueError(f"noise.schedule 'exponential' needs sigma_start > 0 and sigma_end > 0 (geometric "
                             f"decay), got {self.sigma_start} -> {self.sigma_end}")
        least = 1 if self.schedule == "constant" else 2  # staged schedules keep stage 0 noise-free
        if self.stages < least:
            raise ValueError(f"noise.stages must be >= {least} for schedule '{self.schedule}'"
                             + (" (stage 0 is noise-free)" if least == 2 else "") + f", got {self.stages}")
