"""AQN noise schedules: the noise scale sigma for a training step, chosen by a registered name.

Training splits into K = cfg.stages equal intervals, stage k = min(floor(s * K / T), K - 1); steps past T
stay in the last. Staged schedules keep stage 0 noise-free and run from sigma_start (stage 1) to sigma_end
(stage K-1) along t = (k - 1) / (K - 2); `constant` is sigma_start everywhere. Formulas: docs/noise.md."""

from __future__ import annotations

import math
from typing import Callable

# (sigma_start, sigma_end, t in [0, 1]) -> sigma
StageCurve = Callable[[float, float, float], float]
# (step, total_steps, cfg) -> (sigma, stage)
SigmaSchedule = Callable[[int, int, object], tuple[float, int]]


def stage_of(step: int, total_steps: int, stages: int) -> int:
    """Index of the equal interval that `step` falls in (clamped to the last one)."""
    return min(step * stages // total_steps, stages - 1)


def _staged(curve: StageCurve) -> SigmaSchedule:
    """A schedule with a noise-free stage 0 and `curve` across stages 1..K-1 (end points exact)."""

    def schedule(step: int, total_steps: int, cfg) -> tuple[float, int]:
        stages = int(cfg.stages)  # >= 2, checked by NoiseConfig
        stage = stage_of(step, total_steps, stages)
        if stage == 0:
            return 0.0, 0
        sigma_start, sigma_end = float(cfg.sigma_start), float(cfg.sigma_end)
        if stage == 1:
            return sigma_start, stage
        if stage == stages - 1:
            return sigma_end, stage
        return curve(sigma_start, sigma_end, (stage - 1) / (stages - 2)), stage

    return schedule


def _constant(step: int, total_steps: int, cfg) -> tuple[float, int]:
    stages = int(cfg.stages)  # >= 1, checked by NoiseConfig
    return float(cfg.sigma_start), stage_of(step, total_steps, stages)


SCHEDULES: dict[str, SigmaSchedule] = {
    "exponential": _staged(lambda start, end, t: start * (end / start) ** t),  # geometric (QeRL)
    "linear": _staged(lambda start, end, t: start + (end - start) * t),
    "cosine": _staged(lambda start, end, t: end + (start - end) * 0.5 * (1.0 + math.cos(math.pi * t))),
    "constant": _constant,
}


def sigma_at(step: int, total_steps: int, cfg) -> tuple[float, int]:
    """(sigma, stage) for 0-based `step` of a run of `total_steps` steps under `cfg` (a NoiseConfig)."""
    if int(total_steps) < 1:
        raise ValueError(f"total_steps must be >= 1, got {total_steps}")
    if int(step) < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    return SCHEDULES[cfg.schedule](int(step), int(total_steps), cfg)


def stage_table(total_steps: int, cfg) -> list[dict]:
    """One row per stage: {'stage', 'first_step', 'last_step', 'sigma'} (for docs and logs)."""
    rows: dict[int, dict] = {}
    for step in range(int(total_steps)):
        sigma, stage = sigma_at(step, total_steps, cfg)
        row = rows.setdefault(stage, {"stage": stage, "first_step": step, "last_step": step, "sigma": sigma})
        row["last_step"] = step
    return [rows[k] for k in sorted(rows)]
