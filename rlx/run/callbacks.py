"""`train.callbacks`: your code at each RL step's start and end (docs/runs.md, "Callbacks"). A callback observes
(no model, optimizer or batch), so it changes no trained value; one that raises ends the run."""

from __future__ import annotations

from hydra.utils import instantiate

HOOKS = ("on_step_start", "on_step_end")


class Callbacks:
    """The run's callbacks, built from `train.callbacks`, called in list order."""

    def __init__(self, specs=()):
        self.items = [instantiate({"_target_": s} if isinstance(s, str) else s) for s in specs]
        for cb in self.items:
            if not any(callable(getattr(cb, h, None)) for h in HOOKS):
                raise ValueError(f"train.callbacks: {type(cb).__qualname__} defines none of {', '.join(HOOKS)}")

    def on_step_start(self, step: int, world) -> None:
        for cb in self.items:
            if hasattr(cb, "on_step_start"):
                cb.on_step_start(step, world)

    def on_step_end(self, step: int, metrics: dict, world) -> None:
        for cb in self.items:
            if hasattr(cb, "on_step_end"):
                cb.on_step_end(step, metrics, world)
