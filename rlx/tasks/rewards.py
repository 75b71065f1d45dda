"""Reward functions: a registry of named functions `(completion, example) -> float`.

They parse text only; model output is never evaluated as code. `correct`, `format` and the numeric
side of `stated_answer` are linear-time string operations; math-verify runs in a worker process under a
hard time and memory bound (rlx.tasks.verify), since it can hang on short inputs.

`stated_answer` is the benchmark tasks' reward (gsm8k, wordproblems, math; docs/rewards.md): a numeric
gold must be stated as that number (rlx.tasks.answers.stated), a symbolic gold is checked by math-verify on the
final answer. `math_verify` is the earlier reward, kept to reproduce earlier runs: it evaluates
expressions (`18 - 2` for 16 scores 1), which policies learn to exploit; `rlx-audit` shows it.
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


def several_answers(completion: str) -> bool:
    """Whether the completion gives more than one final answer: `####` parts that differ, boxes that differ,
    or a box inside a box (`\\boxed{5 \\boxed{4}}`), so a reward that reads the last one cannot be paid by
    listing candidates. A completion over MAX_CHARS counts too (it is not read)."""
    from rlx.tasks.answers import top_level_boxes
    from rlx.tasks.answers.stated import MAX_CHARS

    if len(completion) > MAX_CHARS:
        return True
    hashes = {h.strip() for h in completion.split("####")[1:]}
    boxes = top_level_boxes(completion)
    return len(hashes) > 1 or any("\\boxed" in b for b in boxes) or (not hashes and len(set(boxes)) > 1)


@register_reward("correct")
def correct(completion: str, example) -> float:
    """1 if the completion's final answer equals the gold answer exactly (after trimming spaces), and it gives
    only one (`several_answers`)."""
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
    """Equivalence of the completion's final answer (`final_answer`) and the gold answer under
    math-verify, each read as one expression, in a bounded worker pool (rlx.tasks.verify): a timeout,
    a memory blow-up or an over-long / over-nested input scores 0 and is counted (train/reward_timeouts, ...)."""
    return math_verify_batch([completion], [example])[0]


def stated_answer_batch(completions: list[str], examples, loose: bool = True,
                        truncated: list[bool] | None = None) -> list[float]:
    """`stated_answer` for a batch (rlx.tasks.answers.stated for numeric golds; the rest through math-verify in the
    verifier's bounded worker pool, after the same refusals of hedges and conflicting answers). `truncated`
    (per completion; None: not known): a completion the token budget stopped is read strictly
    (rlx.tasks.answers.stated.read_stated)."""
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
    """1 if the completion states the gold answer: a numeric gold as that number in `#### N`, `\\boxed{N}`
    or (loose: chat models) "the answer is N" / the final line's last number, never as an expression, a
    hedge or a list, and never where the token budget cut the text; a symbolic gold by math-verify on the
    final answer (docs/rewards.md)."""
    return stated_answer_batch([completion], [example], loose, [truncated])[0]
