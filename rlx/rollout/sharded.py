"""The rollout engine of one torchrun rank of N (rlx.run.distributed holds the process group it gathers over)."""

from __future__ import annotations

from contextlib import nullcontext

from rlx.rollout.base import RolloutBatch, draw_seeds
from rlx.run.distributed import World


class ShardedEngine:
    """This rank's share of the prompts, all-gathered; the seeds are the global batch's. Else the wrapped engine."""

    def __init__(self, engine, world: World, gathered=nullcontext):
        self.__dict__.update(engine=engine, world=world, gathered=gathered)

    def __getattr__(self, name):
        return getattr(self.__dict__["engine"], name)

    def __setattr__(self, name, value):
        setattr(self.engine, name, value)

    def generate(self, prompts, n, sampling, generator, seeds=None):
        seeds = draw_seeds(generator, len(prompts) * n) if seeds is None else list(seeds)
        sl = self.world.shard(len(prompts))
        local = None
        if sl.stop > sl.start:
            with self.gathered():  # fsdp: whole layers while this rank decodes at its own pace
                local = self.engine.generate(prompts[sl], n, sampling, generator, seeds=seeds[sl.start * n: sl.stop * n])
            local.group = local.group + sl.start  # prompt ids of the global batch
        parts = [b for b in self.world.gather(local) if b is not None]
        return RolloutBatch.concat(parts, self.engine.tok.pad_token_id)

    def metrics(self) -> dict:
        """The wrapped engine's; one that counts per rank (episodes: rlx.envs) gets the gather (every rank calls)."""
        if getattr(self.engine, "gathers_metrics", False):
            return self.engine.metrics(gather=self.world.gather)
        return self.engine.metrics()
