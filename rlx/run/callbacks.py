"""`train.callbacks`: your code at fixed points of the RL loop (rlx.train), as Lightning's and TRL's callbacks.

Each entry is a Hydra `_target_` config, its keyword arguments beside it, or the dotted path of a class
built without arguments:

    train:
      callbacks:
        - _target_: mypkg.alerts.RewardAlert
          below: 0.1
        - mypkg.alerts.PrintSteps

on the command line: `'train.callbacks=[{_target_:mypkg.alerts.RewardAlert,below:0.1}]'`. The module must be
importable by every process of the run (the launch directory is; else PYTHONPATH). A callback defines any of

    on_step_start(step, world)         before step `step` generates
    on_step_end(step, metrics, world)  once the step's metrics are logged and its checkpoint, if due, is saved

`world` is this process's rlx.run.distributed.World (rank, size). A callback observes: it is handed no
model, optimizer or batch, so adding or removing one changes no trained value and a resume may change the
list (rlx.run.resume.RESUMABLE_CHANGES). One that raises ends the run as a failing step does.
"""

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
