"""task=wordproblems: seeded GSM8K-style word problems with a graded number of steps, scored like GSM8K."""

from __future__ import annotations

import re

import pytest

from rlx.tasks import build_task
from tests.conftest import compose

OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}


def _task(*overrides):
    return build_task(compose(["task=wordproblems", "task.n_train=300", "task.n_eval=100", *overrides]).task)


def _recompute(ex) -> int:
    """The answer from the structured record alone (independent of the generator's arithmetic)."""
    value = ex.columns["start"]
    for op, b in ex.columns["steps"]:
        if op == "/":
            assert value % b == 0, f"unequal shares in {ex.prompt!r}"
            value //= b
        else:
            value = OPS[op](value, b)
        assert 0 <= value <= 1000
    return value


def test_seeded_and_disjoint():
    a, b = _task(), _task()
    assert [e.prompt for e in a.train] == [e.prompt for e in b.train] and [e.answer for e in a.eval] == [e.answer for e in b.eval]
    assert [e.prompt for e in _task("task.seed=7").train] != [e.prompt for e in a.train]
    assert len(a.train) == 300 and len(a.eval) == 100
    assert not {e.prompt for e in a.train} & {e.prompt for e in a.eval}  # held-out split never seen in training
    assert len({e.key for e in a.train + a.eval}) == 400


@pytest.mark.parametrize("steps", [1, 2, 4])
def test_answers_recompute_and_the_text_states_every_number(steps):
    t = _task(f"task.steps={steps}")
    ops_seen = set()
    for ex in t.train + t.eval:
        assert len(ex.columns["steps"]) == steps  # difficulty = arithmetic steps per problem
        assert ex.answer == str(_recompute(ex)) and ex.columns["answer"] == ex.answer
        story = ex.prompt.split("\n")[0]
        numbers = [int(n) for n in re.findall(r"\d+", story)]
        assert numbers == [ex.columns["start"]] + [b for _, b in ex.columns["steps"]]  # in order, nothing else
        assert story.endswith("have now?") and "'#### N'" in ex.prompt
        assert ex.solution.splitlines()[-1] == f"#### {ex.answer}" and len(ex.solution.splitlines()) == steps + 1
        ops_seen |= {op for op, _ in ex.columns["steps"]}
    assert ops_seen == {"+", "-", "*", "/"}


def test_difficulty_changes_the_step_count_and_is_checked():
    lens = {s: {len(e.columns["steps"]) for e in _task(f"task.steps={s}").eval} for s in (1, 3)}
    assert lens == {1: {1}, 3: {3}}
    assert _task("task.steps=1").eval[0].prompt.count(".") < _task("task.steps=3").eval[0].prompt.count(".")
    with pytest.raises(ValueError, match="task.steps must be in"):
        _task("task.steps=0")
    with pytest.raises(ValueError, match="task.max_operand must be >= 2"):
        _task("task.max_operand=1")


def test_gsm8k_style_reward():
    t = _task()
    ex = t.eval[0]
    wrong = str(int(ex.answer) + 1)
    right = f"{ex.solution}"  # worked lines then '#### N'
    scores = t.score([ex] * 4, [right, f"Let me think.\n#### {ex.answer}", f"{ex.answer} apples?\n#### {wrong}", "no idea"])
    assert scores == {"stated_answer": [1.0, 1.0, 0.0, 0.0]}
    assert t.passed(scores) == [True, True, False, False]


def test_preset_sets_a_generation_budget_and_the_gsm8k_reward():
    cfg = compose(["task=wordproblems"])
    assert cfg.task.rewards == {"stated_answer": 1.0} and cfg.rollout.max_new_tokens >= 128
