"""Reward functions: a registry of named functions `(completion, example) -> float` that parse text only; why
`stated_answer` and not `math_verify`, which pays for expressions: docs/rewards.md."""

from __future__ import annotations

import re

from rlx.tasks.answers import final_answer

REWARDS: dict = {}
BATCH: dict = {}  # name -> fn(completions, examples) -> [float]: the same reward scored a batch at a time

# ASCII digits only: `\d` would also take fullwidth (１２) digits, which no gold uses and `int()` would read
_INT = re.compile(r"^\s*(-?[0-9]+)\s*$", re.ASCII)


def register_reward(name: str, batch=None):
    """Register `fn(completion, example) -> float` under `name`; `batch`: the same for a batch (Task.score's)."""
    def deco(fn):
        REWARDS[name] = fn
        if batch is not None:
            BATCH[name] = batch
        return fn

    return deco


def several_answers(completion: str) -> bool:
    """Whether the completion gives several final answers (or is over MAX_CHARS): listing candidates is no answer."""
    from rlx.tasks.answers import top_level_boxes
    from rlx.tasks.answers.stated import MAX_CHARS

    if len(completion) > MAX_CHARS:
        return True
    hashes = {h.strip() for h in completion.split("####")[1:]}
    boxes = top_level_boxes(completion)
    return len(hashes) > 1 or any("\\boxed" in b for b in boxes) or (not hashes and len(set(boxes)) > 1)


@register_reward("correct")
def correct(completion: str, example) -> float:
    """1 if the completion gives one final answer and it equals the gold exactly (spaces trimmed)."""
    if several_answers(completion):
        return 0.0
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
    """Equivalence of the final answer and the gold under math-verify, bounded (rlx.tasks.verify)."""
    return math_verify_batch([completion], [example])[0]


def stated_answer_batch(completions: list[str], examples, loose: bool = True,
                        truncated: list[bool] | None = None) -> list[float]:
    """`stated_answer` for a batch (`truncated`: per completion, cut at the token budget; None: not known)."""
    from rlx.tasks.answers.stated import numeric_gold, read_stated
    from rlx.tasks.verify import default_verifier, symbolic_refusal

    out = [0.0] * len(completions)
    symbolic, where = [], []
    cut = list(truncated) if truncated is not None else [False] * len(completions)
    for i, (c, ex) in enumerate(zip(completions, examples)):
        gold = numeric_gold(ex.answer)
        if gold is not None:
            r = read_stated(c, loose, truncated=bool(cut[i]))
            out[i] = float(r.value is not None and r.value == gold)
        elif symbolic_refusal(c, ex.answer) is None:
            symbolic.append((ex.answer, c))
            where.append(i)
    if symbolic:
        for i, v in zip(where, default_verifier().score(symbolic)):
            out[i] = v
    return out


@register_reward("stated_answer", batch=stated_answer_batch)
def stated_answer(completion: str, example, loose: bool = True, truncated: bool = False) -> float:
    """1 if the completion states the gold (numeric: read_stated; symbolic: math-verify; docs/rewards.md)."""
    return stated_answer_batch([completion], [example], loose, [truncated])[0]
