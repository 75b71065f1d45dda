"""noise group: Adaptive Quantization Noise (QeRL) on norm weights, on a K-stage schedule. `build_noise(cfg,
total_steps, seed)` -> NoiseInjector (type `aqn`) or None; `sigma_at` -> (sigma, stage)."""

from __future__ import annotations

from typing import Callable

from rlx.noise.aqn import NoiseInjector, generator_seed
from rlx.noise.config import NoiseConfig
from rlx.noise.norms import NormSite, find_norm_sites, norm_parameters
from rlx.noise.schedules import SCHEDULES, sigma_at, stage_of, stage_table

NOISE_TYPES: dict[str, Callable[..., NoiseInjector | None]] = {"none": lambda cfg, total_steps, seed: None,
                                                               "aqn": NoiseInjector}


def build_noise(cfg, total_steps: int, seed: int) -> NoiseInjector | None:
    """The injector for `cfg.type` (None for `none`); the schedule against `total_steps` is checked here."""
    return NOISE_TYPES[cfg.type](cfg, total_steps, seed)  # the name was checked by NoiseConfig


__all__ = ["NOISE_TYPES", "SCHEDULES", "NoiseConfig", "NoiseInjector", "NormSite", "build_noise", "find_norm_sites",
           "generator_seed", "norm_parameters", "sigma_at", "stage_of", "stage_table"]
