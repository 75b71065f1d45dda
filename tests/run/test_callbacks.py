"""train.callbacks (rlx.run.callbacks): built from Hydra `_target_` configs or dotted paths, called in order."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from rlx.run.callbacks import Callbacks
from rlx.run.distributed import World
from tests.conftest import compose
from tests.faults import FORCED, FailAt, fail_overrides

CALLS: list[tuple] = []


class Recorder:
    def __init__(self, name: str = "plain"):
        self.name = name

    def on_step_start(self, step, world):
        CALLS.append((self.name, "start", step, world.rank))

    def on_step_end(self, step, metrics, world):
        CALLS.append((self.name, "end", step, metrics["x"]))


class StartOnly:
    def on_step_start(self, step, world):
        CALLS.append(("start_only", step))


class NoHooks:
    pass


def test_callbacks_are_built_from_targets_and_paths_and_called_in_list_order():
    CALLS.clear()
    specs = OmegaConf.create([{"_target_": f"{__name__}.Recorder", "name": "a"}, f"{__name__}.StartOnly"])
    cbs = Callbacks(specs)
    cbs.on_step_start(3, World(rank=1, size=2))
    cbs.on_step_end(3, {"x": 0.5}, World(rank=1, size=2))
    assert CALLS == [("a", "start", 3, 1), ("start_only", 3), ("a", "end", 3, 0.5)]


def test_an_object_without_hooks_is_refused_naming_them():
    with pytest.raises(ValueError, match="NoHooks defines none of on_step_start, on_step_end"):
        Callbacks([f"{__name__}.NoHooks"])


def test_fail_overrides_compose_into_a_callback_that_raises_on_its_rank_only():
    cfg = compose(fail_overrides(3, rank=1))
    (cb,) = Callbacks(cfg.train.callbacks).items
    assert isinstance(cb, FailAt)
    cb.on_step_start(3, World(rank=0, size=2))  # another rank: goes on
    cb.on_step_start(2, World(rank=1, size=2))  # another step
    with pytest.raises(RuntimeError, match=f"{FORCED} on rank 1 at step 3"):
        cb.on_step_start(3, World(rank=1, size=2))
