"""VerifiersEngine: `engine.generate` runs a verifiers environment's rollouts on the engine it wraps.

A ChatEngine (rlx.envs.ecosystem.chat_engine: the engine interface kept, episodes concurrent, every model call
through rlx's client, one engine.generate per wave of calls):

    prompts (rendered rows) -> the environment's rows -> n rollouts each (`env.rollout` with rlx's client)
    -> one RolloutBatch (`forced` on every token between calls, so the loss is on the sampled tokens only),
       `texts` the last reply of each episode carrying its state (vf_task.EpisodeText: what the rubric scores)
"""

from __future__ import annotations

import copy

import torch

from rlx.envs.driver import Budget
from rlx.envs.ecosystem.chat_engine import ChatEngine
from rlx.envs.ecosystem.vf_load import load, render, rows
from rlx.envs.ecosystem.vf_task import EpisodeText, scoring_state
from rlx.rollout.base import RolloutBatch


class VerifiersEngine(ChatEngine):
    """`engine` whose `generate` runs episodes of the verifiers environment `env` (loaded from `name`)."""

    def __init__(self, engine, env, tok, budget: Budget, name: str):
        super().__init__(engine, tok, budget, name)
        object.__setattr__(self, "vf_env", env)
        object.__setattr__(self, "_rows", None)

    def _input(self, prompt) -> dict:
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

    async def _episode(self, row: dict, client, r: int):
        args = {k: v for k, v in (self.vf_env.sampling_args or {}).items() if k in ("max_tokens", "stop")}
        return await self.vf_env.rollout(copy.deepcopy(row), client, "rlx", args)

    def _finish(self, batch: RolloutBatch, episodes: list, states: list) -> None:
        for ep, state in zip(episodes, states):
            ep.info = {"calls": float(sum(t.role == "policy" for t in ep.turns)),
                       "errors": float(state.get("error") is not None)}
        batch.texts = [EpisodeText(ep.answer, scoring_state(st)) for ep, st in zip(episodes, states)]
        batch.env_reward = torch.zeros(len(episodes), dtype=torch.float32)  # [N] the rubric is the task's reward


class Verifiers:
    """env=verifiers in rlx.envs.registry: no per-episode Environment; `wrap` builds the engine, `task` the task."""

    INSTRUCTIONS = ""  # the environment's rows carry their own prompts
    stop_strings: tuple[str, ...] = ()

    @staticmethod
    def wrap(cfg, engine, tok) -> VerifiersEngine:
        return VerifiersEngine(engine, load(cfg.id, dict(cfg.args or {})), tok, Budget.from_config(cfg), str(cfg.id))

    @staticmethod
    def task(cfg, seed: int = 0, task_cfg=None):  # the environment's own dataset: the task group is not read
        from rlx.envs.ecosystem.vf_task import VerifiersTask

        return VerifiersTask(cfg, seed)
