"""How the loop gets its groups from an engine. Today: synchronous (every sample comes from the
policy of the last sync); the stale and async schedules of the off-policy issue plug in here.

AQN lives in the engine's weights: noise is put on `engine.noise_target()` for the generation
only and taken off again before anything else happens (QeRL: the sampling policy is noisy, the
trained one is not).
"""

from __future__ import annotations

from contextlib import nullcontext

import torch

from rlx.rollout.base import RolloutBatch, RolloutEngine, SamplingParams


def generate_groups(engine: RolloutEngine, task, n_prompts: int, group_size: int, sampling: SamplingParams,
                    generator: torch.Generator, *, noise=None, step: int = 0, skip=None,
                    metrics: dict | None = None) -> tuple[list, RolloutBatch]:
    """n_prompts training prompts -> group_size completions each (under AQN noise when given)."""
    examples = task.sample(n_prompts, skip=skip)
    noisy = noise.applied(engine.noise_target(), step) if noise is not None else nullcontext({})
    with noisy as noise_metrics:
        batch = engine.generate([e.prompt for e in examples], group_size, sampling, generator)
    if metrics is not None:
        metrics.update(noise_metrics)
    return examples, batch
