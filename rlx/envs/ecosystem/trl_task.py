"""TrlTask: the task group's task, its prompts made chat and rendered with a TRL-style environment's tool schemas.

env=trl trains on the run's own task (task=wordproblems, a dataset file, ...): its examples are the rows an
environment's `reset(**row)` gets, its rewards score the last reply. Two things change, here:
- every prompt is a chat prompt (a string prompt becomes one user message: tools exist only in chat
  templates) rendered by the policy's chat template with the environment's tool schemas, so the model sees
  them, and every prompt-length bound (the engine's context, the tiny model's positions) counts them;
- the engine finds a prompt's example here (`example_for`): the one TrlTask of the run registers itself under
  its `env.factory`, as env=verifiers' task and engine share their loaded environment.

Everything else (sampling, scoring, state for resume, evaluation sets) is the wrapped task's.
"""

from __future__ import annotations

import dataclasses

from rlx.envs.ecosystem.vf_load import render
from rlx.tasks.base import Example

_TASKS: dict[str, "TrlTask"] = {}  # env.factory -> the task built last in this process for it
_OWN = ("task", "spec", "schemas", "_by_prompt")


def example_for(spec: str, prompt) -> Example:
    """The example of the run's TrlTask whose rendered prompt is `prompt`."""
    task = _TASKS.get(spec)
    if task is None:
        raise ValueError(f"env.factory={spec!r}: no TrlTask was built in this process; env=trl needs the task that "
                         f"rlx.envs.env_task(cfg.env, cfg.seed, cfg.task) builds")
    return task.example(prompt)


def _as_chat(examples: list[Example]) -> list[Example]:
    return [e if e.messages is not None else dataclasses.replace(e, messages=[{"role": "user", "content": e.prompt}])
            for e in examples]


class TrlTask:
    """The task `task_cfg` builds, with chat prompts carrying `schemas` (see the module docstring)."""

    def __init__(self, task_cfg, spec: str, schemas: list[dict]):
        from rlx.tasks import build_task

        task = build_task(task_cfg)
        for key, value in zip(_OWN, (task, spec, schemas, None)):
            object.__setattr__(self, key, value)
        task.train, task.eval = _as_chat(task.train), _as_chat(task.eval)
        task.eval_sets = {name: _as_chat(ex) for name, ex in task.eval_sets.items()}
        _TASKS[spec] = self

    def __getattr__(self, name):
        return getattr(self.__dict__["task"], name)

    def __setattr__(self, name, value):
        if name in _OWN:
            object.__setattr__(self, name, value)
        else:
            setattr(self.task, name, value)

    tools = property(lambda self: self.schemas or None)  # what the template renders in every prompt

    def render_chat(self, tok, all_prompts: bool = False) -> None:
        """Every prompt through the policy's chat template with the tool schemas (model.chat_prompts is moot)."""
        if not getattr(tok, "chat_template", None):
            raise ValueError(f"env.factory={self.spec!r}: the tools reach the model through its chat template, and the "
                             f"model's tokenizer has none; set model.chat_template (a tool-calling template, e.g. "
                             f"examples/envs/chatml_tools.jinja)")

        def rendered(examples: list[Example]) -> list[Example]:
            return [dataclasses.replace(e, prompt=render(tok, e.messages, self.schemas or None)) for e in examples]

        task = self.task
        task.train, task.eval = rendered(task.train), rendered(task.eval)
        task.eval_sets = {name: rendered(ex) for name, ex in task.eval_sets.items()}
        task.chat = True
        self._by_prompt = None

    def example(self, prompt) -> Example:
        if self._by_prompt is None:
            table: dict[str, Example] = {}
            for e in [*self.task.train, *self.task.eval, *(e for ex in self.task.eval_sets.values() for e in ex)]:
                table.setdefault(e.prompt, e)
            self._by_prompt = table
        if not isinstance(prompt, str) or prompt not in self._by_prompt:
            raise ValueError(f"env.factory={self.spec!r}: a prompt that is none of the task's (rendered) prompts: "
                             f"{str(prompt)[:120]!r}")
        return self._by_prompt[prompt]
