"""Reward functions: a registry of named functions `(completion, example) -> float`.

They parse text only; model output is never evaluated as code. `correct` and `format` are
linear-time string operations; `math_verify` runs in a worker process under a hard time and
memory bound (rlx.tasks.verify), since math-verify itself can hang on short inputs.
"""

from __future__ import annotations

import re

REWARDS: dict = {}

_INT = re.compile(r"^\s*(-?\d+)\s*$")


def register_reward(name: str):
    def deco(fn):
        REWARDS[name] = fn
        return fn

    return deco


def last_boxed(text: str) -> str | None:
    """The content of the last \\boxed{...}, nested braces included (None if there is none or it is unclosed)."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    i = start + len("\\boxed{")
    depth = 1
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i:j]
    return None


def final_answer(text: str) -> str | None:
    """The final answer of a completion: the text after the last '####' or inside the last \\boxed{}, else the whole."""
    if "####" in text:
        return text.rsplit("####", 1)[1].strip()
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed.strip()
    return text.strip()


@register_reward("correct")
def correct(completion: str, example) -> float:
    """1 if the completion's final answer equals the gold answer exactly (after trimming spaces)."""
    ans = final_answer(completion)
    return float(ans is not None and ans == example.answer.strip())


@register_reward("format")
def format_ok(completion: str, example) -> float:
    """1 if the completion is a bare (signed) integer, the synthetic tasks' answer format."""
    return float(_INT.match(completion) is not None)


@register_reward("math_verify")
def math_verify_reward(completion: str, example) -> float:
    """Equivalence of the completion's final answer and the gold answer under math-verify, in a
    bounded worker (rlx.tasks.verify): a timeout, a memory blow-up or an over-long / over-nested
    input scores 0 and is counted (train/reward_timeouts, ...)."""
    from rlx.tasks.verify import default_verifier

    return default_verifier()(example.answer, completion)
