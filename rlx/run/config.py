"""The run-level schemas `trainer.*`, `train.*` and `logger.*`, with the checks of their single values in
`__post_init__` (run when rlx.config.preflight converts the nodes)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Optional

LOGGER_MODES = ("offline", "online", "disabled")  # logger.mode (rlx.run.logging)


@dataclass
class TrainerConfig:
    """Where and how the trainer computes (rlx.run.device resolves it; docs/engine.md, "Devices")."""

    device: str = field(default="auto", metadata={"help": "auto | cpu | cuda | cuda:N"})
    dtype: str = field(default="auto", metadata={
        "help": "auto | fp32 | bf16 (autocast forwards; LoRA and optimizer stay fp32). auto: bf16 on a GPU or a CPU "
                "with bf16 instructions (avx512_bf16, amx_bf16, aarch64 bf16), else fp32"})
    threads: int = field(default=-1, metadata={
        "help": "torch intra-op threads: -1 = the free cores, re-measured each step; 0 = every core; N"})
    strategy: str = field(default="ddp", metadata={
        "help": "under torchrun: ddp (replicated weights) | fsdp (FSDP2, decoder layers sharded)"})
    dist_timeout_s: float = field(default=600.0, metadata={
        "help": "under torchrun: a collective that waits longer ends the run"})
    malloc_mmap_threshold_mb: float = field(default=0.0, metadata={
        "help": "CPU: blocks >= this many MiB get their own mapping, freed at once (lower peak RSS, more page faults; "
                "rlx.run.allocator); 0 = glibc's rule"})


@dataclass
class TrainConfig:
    steps: int = field(default=60, metadata={"help": "RL steps (optimizer updates)"})
    eval_every: int = field(default=20, metadata={"help": "held-out evaluation every N steps (and at the end)"})
    ckpt_every: int = field(default=20, metadata={"help": "checkpoint every N steps (and at the end)"})
    resume: str = field(default="auto", metadata={"help": "auto | never"})
    log_every: int = field(default=1, metadata={"help": "a console / train.log line every N steps when the bar is off"})
    progress: bool = field(default=True, metadata={"help": "show a progress bar"})
    # G samples are all alike with probability p^G + (1-p)^G: many such steps mean p near 0 or 1 (docs/rewards.md)
    no_signal_steps: int = field(default=10, metadata={
        "help": "a [warn] line in train.log when no sampled group has had differing rewards for this many steps in a "
                "row (no gradient from the reward: rlx.rollout.metrics.SignalMonitor); 0 = off"})
    callbacks: list[Any] = field(default_factory=list, metadata={
        "help": "objects called at each step's start and end: Hydra _target_ configs or dotted class paths "
                "(rlx.run.callbacks)"})

    def __post_init__(self) -> None:
        for key in ("eval_every", "ckpt_every", "log_every"):
            if getattr(self, key) < 1:
                raise ValueError(f"train.{key} must be >= 1, got {getattr(self, key)}")
        if self.steps < 0:
            raise ValueError(f"train.steps must be >= 0, got {self.steps}")
        if self.no_signal_steps < 0:
            raise ValueError(f"train.no_signal_steps must be >= 0 (0 = no warning), got {self.no_signal_steps}")
        if self.resume not in ("auto", "never"):
            raise ValueError(f"train.resume: '{self.resume}' is not auto or never")


@dataclass
class LoggerConfig:
    """`mode`: offline (default; no network here) | online | disabled."""

    mode: str = field(default="offline", metadata={"help": "offline | online | disabled"})
    project: str = field(default="rlx", metadata={"help": "wandb project"})
    entity: Optional[str] = field(default=None, metadata={"help": "wandb entity (team or user)"})
    group: Optional[str] = field(default=None, metadata={"help": "wandb group (sweeps set it to their name)"})
    name: Optional[str] = field(default=None, metadata={"help": "wandb run name"})
    tags: list[str] = field(default_factory=list, metadata={"help": "wandb tags"})
    # completion tables (completions.jsonl + a wandb Table) of the first `completions_rows` rows of a step
    completions_every: int = field(default=10, metadata={"help": "every N steps (0 = off)"})
    completions_rows: int = field(default=8, metadata={"help": "rows per dump"})
    completions_max_mb: float = field(default=5.0, metadata={
        "help": "cap of completions.jsonl (oldest dumps dropped, the newest kept) and of the tables sent to wandb "
                "(after it, no more tables); MB"})

    def __post_init__(self) -> None:
        for ok, key, why, value in (
                (self.mode in LOGGER_MODES, "logger.mode", f"must be one of {list(LOGGER_MODES)}", self.mode),
                (self.completions_every >= 0, "logger.completions_every", "must be >= 0 (0 = no completion tables)",
                 self.completions_every),
                (self.completions_rows >= 1, "logger.completions_rows", "must be >= 1", self.completions_rows),
                (0 < self.completions_max_mb < math.inf, "logger.completions_max_mb", "must be > 0",
                 self.completions_max_mb)):
            if not ok:
                raise ValueError(f"{key} {why}; got {value!r}")


def as_config(node):
    """A composed `trainer`, `train` or `logger` node as its dataclass, checked (its __post_init__)."""
    from omegaconf import OmegaConf

    return node if isinstance(node, (TrainerConfig, TrainConfig, LoggerConfig)) else OmegaConf.to_object(node)
