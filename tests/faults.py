"""Forced failures for the resume and crash tests: the overrides that make a run raise at a step.

Every test that needs a run to die at step N asks this module for its overrides, so the mechanism
(a `train.callbacks` entry, rlx.run.callbacks) can move without touching the tests."""

from __future__ import annotations

FORCED = "forced failure"  # what the error says (tests match on it)


class FailAt:
    """A callback that raises at the start of `step`, on `rank` only (-1 = every rank): a crash of one
    sweep arm, or of one torchrun rank, at a known point."""

    def __init__(self, step: int, rank: int = -1):
        self.step, self.rank = step, rank

    def on_step_start(self, step: int, world) -> None:
        if step == self.step and self.rank in (-1, world.rank):
            raise RuntimeError(f"{FORCED} on rank {world.rank} at step {step} (tests.faults.FailAt)")


def fail_overrides(step: int, rank: int = -1) -> list[str]:
    """Hydra overrides that make the run raise at the start of `step` (on `rank` only under torchrun;
    -1 = every rank). The run's processes import this module: launch them from the repository root
    (or with it on PYTHONPATH)."""
    return [f"train.callbacks=[{{_target_:tests.faults.FailAt,step:{step},rank:{rank}}}]"]
