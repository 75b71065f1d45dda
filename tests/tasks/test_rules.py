"""task=rules: keyed digit-string rules whose rewarded choice the SFT demonstrator seldom shows."""

from __future__ import annotations

from collections import Counter

import pytest

from rlx.tasks import build_task
from rlx.tasks.rewards import REWARDS
from tests.conftest import compose


def _task(*overrides):
    return build_task(compose(["task=rules", "task.n_train=3000", "task.n_eval=200", *overrides]).task)


def test_answers_are_the_keys_rule_by_hand():
    t = _task()
    by_hand = {"copy": lambda s: s, "reverse": lambda s: "".join(reversed(s)), "rotl": lambda s: s[1:] + s[0],
               "rotr": lambda s: s[-1] + s[:-1], "inc": lambda s: "".join("1234567890"[int(c)] for c in s),
               "dec": lambda s: "".join("9012345678"[int(c)] for c in s)}
    assert sorted(Counter(t.rules.values()).values()) == [2] * 6  # 12 keys, each rule serves two
    for ex in t.train[:200] + t.eval:
        key, digits = ex.prompt[0], ex.prompt[2:-1]
        assert ex.prompt == f"{key}:{digits}=" and len(digits) == 4
        assert ex.answer == by_hand[t.rules[key]](digits) and ex.columns["rule"] == t.rules[key]
    assert {e.prompt for e in t.train}.isdisjoint(e.prompt for e in t.eval)
    assert t.rules == _task().rules and [e.prompt for e in t.eval] == [e.prompt for e in _task().eval]  # seeded


def test_the_demonstrator_shows_the_keys_rule_at_demo_correct_and_each_other_rule_evenly():
    t = _task("task.demo_correct=0.1")
    codes = {"copy": "C", "reverse": "R", "rotl": "L", "rotr": "T", "inc": "I", "dec": "D"}
    right = [e.solution == f"{codes[e.columns['rule']]}####{e.answer}" for e in t.train]
    assert abs(sum(right) / len(right) - 0.1) < 0.02  # 3000 draws: sd 0.0055
    others = Counter(e.solution[0] for e, ok in zip(t.train, right) if not ok)
    assert len(others) == 6 and max(others.values()) / min(others.values()) < 1.3
    for e in t.train[:100]:  # every demonstration is some rule applied to the digits, then its answer
        assert e.solution[1:5] == "####"
    assert all(e.solution == f"{codes[e.columns['rule']]}####{e.answer}" for e in t.eval)  # eval: never shown


def test_reward_reads_the_answer_after_the_rule_letter():
    t = _task()
    ex = t.eval[0]
    assert REWARDS["correct"](f"R####{ex.answer}", ex) == 1.0 and REWARDS["correct"](ex.answer, ex) == 1.0
    assert REWARDS["correct"](f"R####{ex.answer}0", ex) == 0.0


@pytest.mark.parametrize("bad, match", [("task.num_keys=0", "num_keys"), ("task.length=1", "length"),
                                        ("task.demo_correct=1.5", "demo_correct"),
                                        ("task.length=2", "task.num_keys / task.length")])
def test_bad_knobs_are_named(bad, match):
    with pytest.raises(ValueError, match=match):
        _task(bad)
