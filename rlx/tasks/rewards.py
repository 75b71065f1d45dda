"""Reward functions: a registry of named functions `(completion, example) -> float`.

They parse text only; model output is never evaluated as code.
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


def _final_answer(text: str) -> str | None:
    """The final answer of a completion: the text after the last '####' or inside the last \\boxed{}, else the whole."""
    if "####" in text:
        return text.rsplit("####", 1)[1].strip()
    m = list(re.finditer(r"\\boxed\{([^{}]*)\}", text))
    if m:
        return m[-1].group(1).strip()
    return text.strip()


@register_reward("correct")
def correct(completion: str, example) -> float:
    """1 if the completion's final answer equals the gold answer exactly (after trimming spaces)."""
    ans = _final_answer(completion)
    return float(ans is not None and ans == example.answer.strip())


@register_reward("format")
def format_ok(completion: str, example) -> float:
    """1 if the completion is a bare (signed) integer, the synthetic tasks' answer format."""
    return float(_INT.match(completion) is not None)


@register_reward("math_verify")
def math_verify_reward(completion: str, example) -> float:
    """Equivalence of the completion's final answer and the gold answer under math-verify."""
    from math_verify import parse, verify

    # math-verify uses signal alarms by default: only valid in the main thread, so disable them.
    gold = parse(example.answer, parsing_timeout=None)
    pred = parse(completion, parsing_timeout=None)
    if not gold or not pred:
        return 0.0
    return float(verify(gold, pred, timeout_seconds=None))
