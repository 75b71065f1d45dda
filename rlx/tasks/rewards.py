"""Reward functions: a registry of named functions `(completion, example) -> float`.

They parse text only; model output is never evaluated as code. `correct` and `format` are
linear-time string operations; `math_verify` runs in a worker process under a hard time and
memory bound (rlx.tasks.verify), since math-verify itself can hang on short inputs.
"""

from __future__ import annotations

import re

from rlx.tasks.answers import final_answer

REWARDS: dict = {}
BATCH: dict = {}  # name -> fn(completions, examples) -> [float]: the same reward scored a batch at a time

# ASCII digits only: `\d` would also take fullwidth (１２) and Arabic-Indic digits, which no task's
# gold answer uses and `int()` would read, so `format` must not pass them
_INT = re.compile(r"^\s*(-?[0-9]+)\s*$", re.ASCII)


def register_reward(name: str, batch=None):
    """Register `fn(completion, example) -> float` under `name`; `batch(completions, examples)` is the same
    reward for a whole batch at once (what Task.score calls when given)."""
    def deco(fn):
        REWARDS[name] = fn
        if batch is not None:
            BATCH[name] = batch
        return fn

    return deco


@register_reward("correct")
def correct(completion: str, example) -> float:
    """1 if the completion's final answer equals the gold answer exactly (after trimming spaces)."""
    ans = final_answer(completion)
    return float(ans is not None and ans == example.answer.strip())


@register_reward("format")
def format_ok(completion: str, example) -> float:
    """1 if the completion is a bare (signed) integer, the synthetic tasks' answer format."""
    return float(_INT.match(completion) is not None)


def math_verify_batch(completions: list[str], examples) -> list[float]:
    """`math_verify` for a batch: the checks run in parallel in the verifier's worker pool."""
    from rlx.tasks.verify import default_verifier

    return default_verifier().score([(ex.answer, c) for c, ex in zip(completions, examples)])


@register_reward("math_verify", batch=math_verify_batch)
def math_verify_reward(completion: str, example) -> float:
    """Equivalence of the completion's final answer (`final_answer`) and the gold answer under
    math-verify, each read as one expression, in a bounded worker pool (rlx.tasks.verify): a timeout,
    a memory blow-up or an over-long / over-nested input scores 0 and is counted (train/reward_timeouts, ...)."""
    return math_verify_batch([completion], [example])[0]
