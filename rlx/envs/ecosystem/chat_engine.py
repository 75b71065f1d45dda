"""ChatEngine: `engine.generate` runs chat episodes whose every model call goes through an RlxClient.

It keeps the engine interface (rlx.rollout.base.RolloutEngine), as rlx.envs.engine.EnvEngine does, so every
schedule, the evaluation and the data-parallel wrapper run these episodes unchanged: each prompt's input
(`_input`) -> n concurrent episodes (asyncio, `_episode`), one engine.generate per wave of model calls -> one
RolloutBatch (every token between calls `forced`), finished by `_finish`. Subclasses: VerifiersEngine and
TrlEngine. Episode seeds, waves and budgets: docs/envs.md ("Turns and tokens"). The event loop is kept across
calls (an environment may hold asyncio objects bound to it); a client's failure is raised once every episode
of the call has ended.
"""

from __future__ import annotations

import asyncio
import threading

from rlx.envs.driver import Budget, _batch
from rlx.envs.ecosystem.vf_client import Record, RlxClient, Waves
from rlx.envs.engine import EnvEngine
from rlx.rollout.base import RolloutBatch, draw_seeds


class ChatEngine(EnvEngine):
    """`engine` whose `generate` runs the episodes `_episode` drives (see the module docstring)."""

    def __init__(self, engine, tok, budget: Budget, name: str):
        super().__init__(engine, None, budget)
        for key, value in (("tok_", tok), ("env_id", name), ("_loop", asyncio.new_event_loop()),
                           ("_gen_lock", threading.Lock())):
            object.__setattr__(self, key, value)

    def _input(self, prompt):
        """What an episode of `prompt` starts from (the environment's row, the task's example)."""
        raise NotImplementedError

    async def _episode(self, given, client: RlxClient, r: int):
        """Drive episode `r` of input `given` to its end; its result goes to `_finish`."""
        raise NotImplementedError

    def _finish(self, batch: RolloutBatch, episodes: list, results: list) -> None:
        """Set the batch's texts and rewards from the episodes and their results."""
        raise NotImplementedError

    def generate(self, prompts, n, sampling, generator, seeds=None) -> RolloutBatch:
        prompts = list(prompts)
        N = len(prompts) * n
        seeds = draw_seeds(generator, N) if seeds is None else [int(s) for s in seeds]
        if len(seeds) != N:
            raise ValueError(f"{type(self).__name__}.generate: {len(seeds)} seeds for {N} episodes")
        with self._gen_lock:
            inputs = [self._input(p) for p in prompts]
            records = [Record(seed) for seed in seeds]
            for r, rec in enumerate(records):  # an episode that never calls the model keeps the prompt
                rec.episode.prompt_ids = self.tok_(prompts[r // n], add_special_tokens=False).input_ids
            results = self._loop.run_until_complete(self._episodes(inputs, n, records, sampling, generator))
        for rec, result in zip(records, results):
            if rec.failure is not None:
                raise rec.failure
            if isinstance(result, BaseException):
                raise result
        episodes = [rec.episode for rec in records]
        batch = _batch(episodes, len(prompts), n, self.tok_.pad_token_id)
        self._finish(batch, episodes, results)
        self._count(episodes)
        return batch

    async def _episodes(self, inputs: list, n: int, records: list[Record], sampling, generator) -> list:
        waves = Waves(self.engine, sampling, generator, running=len(records))

        async def one(r: int):
            client = RlxClient(records[r], waves, self.tok_, self.budget, int(sampling.max_tokens), self.env_id)
            try:
                return await self._episode(inputs[r // n], client, r)
            finally:
                waves.finished()

        return await asyncio.gather(*(one(r) for r in range(len(records))), return_exceptions=True)

    def close(self) -> None:
        self.engine.close()
        if not self._loop.is_closed():
            self._loop.close()
