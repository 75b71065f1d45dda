"""env=trl: a TRL-style environment class (what `GRPOTrainer(environment_factory=...)` takes) trained by rlx.

TRL 1.x's contract, point by point against rlx's, is the table in docs/envs.md ("env=trl"): `env.factory` names
the class; its public functions but `reset`/`get_reward` are the tools, with transformers' `get_json_schema` of
the bound methods as schemas; an episode is `reset(**row)`, then model calls until a reply calls no tool, each
tool result a `tool` message; `get_reward()` once per finished episode is the batch's `env_reward`. Instances
are pooled, one per concurrent episode. Every model call goes through rlx's client (vf_client): the same
token rules as env=verifiers and the same waves of calls.
"""

from __future__ import annotations

import inspect

import torch

from rlx.envs.driver import Budget
from rlx.envs.ecosystem import tool_calls
from rlx.envs.ecosystem.chat_engine import ChatEngine
from rlx.envs.ecosystem.vf_client import Overlong
from rlx.envs.ecosystem.vf_load import import_module
from rlx.rollout.base import RolloutBatch

NOT_TOOLS = ("reset", "get_reward")
_CLASSES: dict[str, object] = {}


def load_factory(spec: str):
    """The callable `spec` names (module:attr, module.attr or file.py:attr), loaded once per process."""
    if spec not in _CLASSES:
        module_part, sep, attr = spec.rpartition(":") if ":" in spec else spec.rpartition(".")
        if not sep or not module_part or not attr:
            raise ValueError(f"env.factory={spec!r}: give 'pkg.module:Class', 'pkg.module.Class' or "
                             f"'path/to/file.py:Class'")
        module = import_module(module_part, key="env.factory")
        factory = getattr(module, attr, None)
        if not callable(factory):
            raise ValueError(f"env.factory={spec!r}: {module.__name__} has no callable {attr!r}")
        _CLASSES[spec] = factory
    return _CLASSES[spec]


def make_env(factory, spec: str):
    """One instance of the factory, refused by name when it has no callable `reset`."""
    env = factory()
    if not callable(getattr(type(env), "reset", None)):
        raise ValueError(f"env.factory={spec!r}: a {type(env).__name__} has no reset method (TRL's contract: "
                         f"reset(**row) starts an episode)")
    return env


def tool_methods(env) -> dict:
    """{name: bound method} of the instance's tools: the class's public functions but reset and get_reward."""
    return {name: getattr(env, name) for name, _ in inspect.getmembers(type(env), predicate=inspect.isfunction)
            if not name.startswith("_") and name not in NOT_TOOLS}


def tool_schemas(env, spec: str = "") -> list[dict]:
    """The tools' JSON schemas, as TRL's chat template call builds them (transformers' get_json_schema)."""
    from transformers.utils import get_json_schema

    out = []
    for name, method in tool_methods(env).items():
        try:
            out.append(get_json_schema(method))
        except Exception as e:  # noqa: BLE001  (a missing hint or docstring entry: name the tool)
            raise ValueError(f"env.factory={spec!r}: tool {name!r} has no JSON schema ({e}); a tool needs type "
                             f"hints on every argument and a Google-style docstring that describes each") from None
    return out


async def run_tool(methods: dict, call: dict) -> tuple[dict, bool]:
    """(the tool message answering an OpenAI tool call, whether it failed)."""
    name = call["function"]["name"]
    try:
        if name not in methods:
            raise ValueError(f"Tool {name} not found.")
        result = methods[name](**tool_calls.arguments(call))
        if inspect.isawaitable(result):
            result = await result
        content, failed = str(result), False
    except Exception as e:  # noqa: BLE001  (the policy reads the error, as TRL answers it)
        content, failed = str({"error": str(e)}), True
    return {"role": "tool", "name": name, "content": content}, failed


async def episode(env, row: dict, messages: list[dict], schemas: list[dict], client) -> dict:
    """One episode of `env` from `row`; returns its counts and reward (None without get_reward)."""
    observation = env.reset(**row)
    if inspect.isawaitable(observation):
        observation = await observation
    if observation is not None:  # appended to the last user message, as TRL does
        messages = [*messages[:-1], {**messages[-1], "content": messages[-1]["content"] + str(observation)}]
    methods, calls, failures = tool_methods(env), 0, 0
    while True:
        try:
            reply = await client.reply(messages, schemas or None)
        except Overlong:  # a budget ended the episode (the client marked it truncated)
            break
        messages = [*messages, reply]
        if not reply.get("tool_calls"):
            break
        for call in reply["tool_calls"]:
            answer, failed = await run_tool(methods, call)
            messages.append(answer)
            calls, failures = calls + 1, failures + failed
    reward = None
    if callable(getattr(type(env), "get_reward", None)):
        reward = env.get_reward()
        reward = float(await reward if inspect.isawaitable(reward) else reward)
    return {"reward": reward, "tool_calls": calls, "tool_failures": failures}


class TrlEngine(ChatEngine):
    """`engine` whose `generate` runs episodes of the environment class `env.factory` names (`spec`), on the
    examples of the run's TrlTask (rlx.envs.ecosystem.trl_task)."""

    def __init__(self, engine, spec: str, tok, budget: Budget):
        super().__init__(engine, tok, budget, spec)
        factory = load_factory(spec)
        probe = make_env(factory, spec)
        for key, value in (("factory", factory), ("schemas", tool_schemas(probe, spec)), ("_pool", [probe])):
            object.__setattr__(self, key, value)

    def _input(self, prompt):
        from rlx.envs.ecosystem.trl_task import example_for

        return example_for(self.env_id, prompt)

    async def _episode(self, example, client, r: int):
        while len(self._pool) <= r:  # one instance per concurrent episode, reused (reset) across calls
            self._pool.append(make_env(self.factory, self.env_id))
        row = {"prompt": example.messages, **example.columns}
        return await episode(self._pool[r], row, list(example.messages), self.schemas, client)

    def _finish(self, batch: RolloutBatch, episodes: list, results: list) -> None:
        for ep, res in zip(episodes, results):
            ep.reward = res["reward"] or 0.0
            ep.info = {"tool_calls": float(res["tool_calls"]), "tool_failures": float(res["tool_failures"])}
        batch.texts = [ep.answer for ep in episodes]
        batch.env_reward = torch.tensor([ep.reward for ep in episodes], dtype=torch.float32)  # [N] get_reward's


class Trl:
    """env=trl in rlx.envs.registry: `wrap` builds the engine, `task` the run's task (the task group's, its
    prompts rendered with the environment's tool schemas)."""

    INSTRUCTIONS = ""  # the tool schemas reach the prompt through the chat template
    stop_strings: tuple[str, ...] = ()

    @staticmethod
    def wrap(cfg, engine, tok) -> TrlEngine:
        return TrlEngine(engine, str(cfg.factory), tok, Budget.from_config(cfg))

    @staticmethod
    def task(cfg, seed: int = 0, task_cfg=None):
        from rlx.envs.ecosystem.trl_task import TrlTask

        if task_cfg is None:
            raise ValueError("env=trl trains on the task group's prompts: rlx.envs.env_task needs the task config "
                             "(env_task(cfg.env, cfg.seed, cfg.task))")
        factory = load_factory(str(cfg.factory))
        return TrlTask(task_cfg, str(cfg.factory), tool_schemas(make_env(factory, str(cfg.factory)), str(cfg.factory)))
