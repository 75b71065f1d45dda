"""VerifiersTask: a verifiers environment's dataset as rlx's prompts and its rubric as rlx's reward (docs/envs.md,
"Prompts and rewards").

Prompts are the `dataset` rows (train) and the `eval_dataset` rows; without one, the last rows of a seeded
shuffle (HOLDOUT_FRAC, at most HOLDOUT_MAX) are held out. Each rubric function is logged by name, weighted by
the rubric; an example passes when its first function of positive weight scores >= 1. The rubric scores each
prompt's episodes with `Rubric.score_group` in a spawn worker bounded by env.reward_timeout_s per group.
An episode's conversation and state reach `score` inside its completion text (`EpisodeText`, a str); a text
without them (scored again later) is scored as a single assistant message.
"""

from __future__ import annotations

import asyncio
import functools
import json
import pickle
import random
import traceback

from rlx.envs.ecosystem.vf_load import clean, load, render, rows
from rlx.tasks.base import Example, Task
from rlx.tasks.workers import WorkerPool, serve

HOLDOUT_FRAC, HOLDOUT_MAX = 0.1, 100
_NOT_SENT = ("client", "usage_tracker")  # a state's live objects: the worker has its own


class EpisodeText(str):
    """An episode's last reply text, carrying the state the rubric scores (`state`, picklable)."""

    state: dict | None = None

    def __new__(cls, text: str, state: dict | None = None):
        out = super().__new__(cls, text)
        out.state = state
        return out

    def __reduce__(self):
        return EpisodeText, (str(self), self.state)


def scoring_state(state) -> dict:
    """What of a finished rollout's state the worker needs: every entry that pickles, live objects left out."""
    out = {}
    for k, v in dict(state).items():
        if k in _NOT_SENT:
            continue
        try:
            pickle.dumps(v)
        except Exception:  # noqa: BLE001  (a lock, a live connection: not for scoring)
            continue
        out[k] = v
    return out


def bare_state(example: Example, text: str) -> dict:
    """The state of a completion text without an episode: the prompt and one assistant message."""
    cols = example.columns
    inp = {"prompt": example.messages or example.prompt, "answer": example.answer, "task": cols.get("task", "default"),
           "info": cols.get("info") or {}, "example_id": cols.get("example_id", 0)}
    return {"input": inp, "completion": [{"role": "assistant", "content": text}], "trajectory": [],
            "timing": {"generation_ms": 0.0, "scoring_ms": 0.0, "total_ms": 0.0, "start_time": 0.0},
            "is_completed": True, "is_truncated": False, "error": None, "reward": None, "metrics": None}


def example_of(row: dict, split: str, i: int) -> Example:
    """A dataset row as rlx's Example (a chat prompt in `messages`, rendered later by render_chat)."""
    info = row.get("info") or {}
    if isinstance(info, str):
        info = json.loads(info) if info.strip() else {}
    prompt = row["prompt"]
    messages = clean(prompt) if isinstance(prompt, list) else None
    solution = str(info.get("solution", "")) if isinstance(info, dict) else ""  # an SFT target, where a row has one
    answer = str(row.get("answer", ""))
    columns = {"answer": answer, "task": row.get("task", "default"), "info": info,
               "example_id": row.get("example_id", i)}
    return Example(key=f"{split}-{row.get('example_id', i)}", prompt="" if messages else str(prompt), answer=answer,
                   solution=solution, columns=columns, messages=messages)


def _setup(env_id: str, args: dict):  # in the worker: the environment's own rubric, an event loop to run it
    return load(env_id, args), asyncio.new_event_loop()


def _score(loaded, states: list[dict]):
    """One group in the worker: ("ok", [(metrics, reward)] per state) | ("raised", traceback)."""
    import verifiers as vf

    env, loop = loaded
    try:
        group = [vf.State(s) for s in states]
        loop.run_until_complete(env.rubric.score_group(group))
        return "ok", [({k: float(v) for k, v in (s.get("metrics") or {}).items()}, float(s.get("reward") or 0.0))
                      for s in group]
    except Exception:  # noqa: BLE001  (the rubric's machinery failed, not one reward function: the run stops)
        return "raised", traceback.format_exc()


def _score_worker(conn, mem_mb: int, arg) -> None:  # runs in the child process
    serve(conn, mem_mb, functools.partial(_setup, *arg), _score)


class VerifiersTask(Task):
    """The task a verifiers environment brings (env=verifiers); see the module docstring."""

    name = "verifiers"

    def __init__(self, env_cfg, seed: int = 0):
        from omegaconf import OmegaConf

        self.env_id, self.env_args = str(env_cfg.id), dict(env_cfg.args or {})
        self.env = load(self.env_id, self.env_args)
        # the Task attributes rlx reads; task.* of the config does not describe this task
        self.cfg = OmegaConf.create({"name": self.name, "rewards": {}, "eval": None, "readings": None})
        self.user_rewards, self.verifier, self.chat = None, None, True
        self._epoch, self._pos, self._order, self._shuffle_seed = 0, 0, None, 0
        names = self.env.rubric._get_reward_func_names()
        weights = [float(w) for w in self.env.rubric._get_reward_weights()]
        if not names:
            raise ValueError(f"env.id={self.env_id}: the environment's rubric has no reward function")
        self.weights: dict[str, float] = {}
        for n, w in zip(names, weights):  # a name given twice: its first weight
            self.weights.setdefault(n, w)
        self.names = {n: n for n in self.weights}
        self.decider = next((n for n, w in zip(names, weights) if w > 0), names[0])  # what `passed` reads
        self.train, self.eval = self._splits(seed)
        self.eval_sets = {"default": self.eval}
        self.pool = WorkerPool(_score_worker, (self.env_id, self.env_args), size=1, spares=1,
                               timeout_s=float(env_cfg.reward_timeout_s), mem_mb=16384, name="rlx-vf-rubric")

    def _splits(self, seed: int) -> tuple[list[Example], list[Example]]:
        train = [example_of(r, "train", i) for i, r in enumerate(rows(self.env, "train"))]
        held = [example_of(r, "eval", i) for i, r in enumerate(rows(self.env, "eval"))]
        if not train:
            raise ValueError(f"env.id={self.env_id}: the environment has no training dataset")
        if not held and len(train) > 1:  # no eval_dataset: the last rows of a seeded shuffle are held out
            order = list(range(len(train)))
            random.Random(seed).shuffle(order)
            k = max(1, min(HOLDOUT_MAX, int(len(train) * HOLDOUT_FRAC)))
            held = [train[i] for i in order[-k:]]
            train = [train[i] for i in sorted(order[:-k])]
        return train, held

    def check_columns(self) -> None:  # the rubric reads the rows verifiers' way, not by TRL's column keywords
        return None

    tools = property(lambda self: getattr(self.env, "oai_tools", None) or None)  # rendered in every chat prompt

    def render_chat(self, tok, all_prompts: bool = False) -> None:
        """Chat prompts through the policy's template with the environment's tool schemas (as the client
        renders them)."""
        import dataclasses

        if not getattr(tok, "chat_template", None):
            raise ValueError(f"env.id={self.env_id}: a verifiers environment speaks in chat messages, and the model's "
                             f"tokenizer has no chat template; set model.chat_template (a Jinja template)")
        tools = getattr(self.env, "oai_tools", None)

        def rendered(examples: list[Example]) -> list[Example]:
            return [e if e.messages is None else dataclasses.replace(e, prompt=render(tok, e.messages, tools))
                    for e in examples]

        self.train, self.eval = rendered(self.train), rendered(self.eval)
        self.eval_sets = {name: rendered(ex) for name, ex in self.eval_sets.items()}

    def score(self, examples: list[Example], completions: list[str],
              truncated: list[bool] | None = None) -> dict[str, list[float]]:
        """{rubric function name: value per completion}, each prompt's completions scored as one group."""
        assert len(examples) == len(completions)
        states = [c.state if isinstance(c, EpisodeText) and c.state is not None else bare_state(e, str(c))
                  for e, c in zip(examples, completions)]
        groups, start = [], 0
        for i in range(1, len(examples) + 1):
            if i == len(examples) or examples[i].key != examples[start].key:
                groups.append((start, i))
                start = i
        answers = self.pool.map([states[a:b] for a, b in groups])
        out = {name: [0.0] * len(states) for name in self.names}
        for (a, b), answer in zip(groups, answers):
            if answer is None:  # past the deadline (counted): the group scores 0
                continue
            kind, value = answer
            if kind != "ok":
                raise RuntimeError(f"env.id={self.env_id}: the rubric failed in its worker:\n{value}")
            for i, (metrics, _) in zip(range(a, b), value):
                for name, v in metrics.items():
                    if name in out:
                        out[name][i] = v
        return out

    def passed(self, per_fn: dict[str, list[float]]) -> list[bool]:
        return [v >= 1.0 for v in per_fn[self.decider]]

    def reward_stats(self) -> dict[str, int]:
        return {f"train/reward_{k}": v for k, v in self.pool.pop_stats().items()}

    def close(self) -> None:
        self.pool.close()
