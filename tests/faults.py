"""Forced failures for the resume and crash tests: the overrides that make a run raise at a step.

Every test that needs a run to die at step N asks this module for its overrides, so the mechanism
(today the train.fail_at_step / train.fail_rank keys) can move without touching the tests."""

from __future__ import annotations


def fail_overrides(step: int, rank: int = -1) -> list[str]:
    """Hydra overrides that make the run raise at the start of `step` (on `rank` only under torchrun;
    -1 = every rank)."""
    out = [f"train.fail_at_step={step}"]
    if rank != -1:
        out.append(f"train.fail_rank={rank}")
    return out
