"""VerifiersEngine: `engine.generate` runs a verifiers environment's rollouts on the engine it wraps.

It keeps the engine interface (rlx.rollout.base.RolloutEngine), as rlx.envs.engine.EnvEngine does, so every
schedule, the evaluation and the data-parallel wrapper run verifiers episodes unchanged:

    prompts (rendered rows) -> the environment's rows -> n rollouts each, all concurrent (asyncio), every
    model call through rlx.envs.ecosystem.vf_client (one engine.generate per wave of calls)
    -> one RolloutBatch (rlx.envs.driver's columns: `forced` on every token between calls, so the loss
       is on the sampled tokens only), `texts` the last reply of each episode carrying its state
       (vf_task.EpisodeText: what the rubric scores)

Episode seeds as rlx's own environments: episode i's call k samples from turn_seed(seed_i, k), so an episode's
tokens do not depend on which episodes share its waves. The rollouts run on one event loop per engine, kept
across calls (an environment may hold asyncio objects bound to it); a lock serialises generate calls.
"""

from __future__ import annotations

import asyncio
import copy
import threading

import torch

from rlx.envs.driver import Budget, _batch
from rlx.envs.ecosystem.vf_client import Record, RlxClient, Waves
from rlx.envs.ecosystem.vf_load import load, render, rows
from rlx.envs.ecosystem.vf_task import EpisodeText, scoring_state
from rlx.envs.engine import EnvEngine
from rlx.rollout.base import RolloutBatch, draw_seeds


class VerifiersEngine(EnvEngine):
    """`engine` whose `generate` runs episodes of the verifiers environment `env` (loaded from `name`)."""

    def __init__(self, engine, env, tok, budget: Budget, name: str):
        super().__init__(engine, None, budget)
        for key, value in (("vf_env", env), ("tok_", tok), ("env_id", name), ("_rows", None),
                           ("_loop", asyncio.new_event_loop()), ("_gen_lock", threading.Lock())):
            object.__setattr__(self, key, value)

    def _row(self, prompt) -> dict:
        """The environment's row whose prompt renders to `prompt` (the task's Example.prompt)."""
        if self._rows is None:
            tools = getattr(self.vf_env, "oai_tools", None)
            table: dict[str, dict] = {}
            for row in rows(self.vf_env, "train") + rows(self.vf_env, "eval"):
                given = row["prompt"]
                text = render(self.tok_, given, tools) if isinstance(given, list) else str(given)
                table.setdefault(text, row)
            object.__setattr__(self, "_rows", table)
        if not isinstance(prompt, str) or prompt not in self._rows:
            raise ValueError(f"env.id={self.env_id}: a prompt that is none of the environment's rows (verifiers "
                             f"episodes start from the environment's dataset): {str(prompt)[:120]!r}")
        return self._rows[prompt]

    def generate(self, prompts, n, sampling, generator, seeds=None) -> RolloutBatch:
        prompts = list(prompts)
        N = len(prompts) * n
        seeds = draw_seeds(generator, N) if seeds is None else [int(s) for s in seeds]
        if len(seeds) != N:
            raise ValueError(f"VerifiersEngine.generate: {len(seeds)} seeds for {N} episodes")
        inputs = [self._row(p) for p in prompts]
        records = [Record(seed) for seed in seeds]
        for r, rec in enumerate(records):  # an episode that never calls the model keeps the row's prompt
            rec.episode.prompt_ids = self.tok_(prompts[r // n], add_special_tokens=False).input_ids
        with self._gen_lock:
            states = self._loop.run_until_complete(self._rollouts(inputs, n, records, sampling, generator))
        for rec, state in zip(records, states):
            if rec.failure is not None:
                raise rec.failure
            if isinstance(state, BaseException):
                raise state
        episodes = [rec.episode for rec in records]
        for ep, state in zip(episodes, states):
            ep.info = {"calls": float(sum(t.role == "policy" for t in ep.turns)),
                       "errors": float(state.get("error") is not None)}
        batch = _batch(episodes, len(prompts), n, self.tok_.pad_token_id)
        batch.texts = [EpisodeText(ep.answer, scoring_state(st)) for ep, st in zip(episodes, states)]
        batch.env_reward = torch.zeros(N, dtype=torch.float32)  # [N] the rubric is the task's reward, scored later
        with self._lock:
            self._window.extend(episodes)
        return batch

    async def _rollouts(self, inputs: list[dict], n: int, records: list[Record], sampling, generator) -> list:
        waves = Waves(self.engine, sampling, generator, running=len(records))
        args = {k: v for k, v in (self.vf_env.sampling_args or {}).items() if k in ("max_tokens", "stop")}

        async def one(r: int):
            client = RlxClient(records[r], waves, self.tok_, self.budget, int(sampling.max_tokens), self.env_id)
            try:
                return await self.vf_env.rollout(copy.deepcopy(inputs[r // n]), client, "rlx", dict(args))
            finally:
                waves.finished()

        return await asyncio.gather(*(one(r) for r in range(len(records))), return_exceptions=True)

    def close(self) -> None:
        self.engine.close()
        if not self._loop.is_closed():
            self._loop.close()


class Verifiers:
    """env=verifiers in rlx.envs.registry: no per-episode Environment; `wrap` builds the engine, `task` the task."""

    INSTRUCTIONS = ""  # the environment's rows carry their own prompts
    stop_strings: tuple[str, ...] = ()

    @staticmethod
    def wrap(cfg, engine, tok) -> VerifiersEngine:
        return VerifiersEngine(engine, load(cfg.id, dict(cfg.args or {})), tok, Budget.from_config(cfg), str(cfg.id))

    @staticmethod
    def task(cfg, seed: int = 0):
        from rlx.envs.ecosystem.vf_task import VerifiersTask

        return VerifiersTask(cfg, seed)
