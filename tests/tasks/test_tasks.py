"""Synthetic tasks, local jsonl datasets and the reward registry."""

import json

import pytest
from omegaconf import OmegaConf

from rlx.tasks.config import TaskConfig
from rlx.tasks import REWARDS, build_task
from rlx.tasks.base import Example


def _cfg(**kw):
    return OmegaConf.merge(OmegaConf.structured(TaskConfig), {"rewards": kw.pop("rewards", {"correct": 1.0})}, kw)


@pytest.mark.parametrize("name,extra", [("arith", {}), ("multiply", {"digits": 2})])
def test_splits_disjoint_and_seeded(name, extra):
    t1 = build_task(_cfg(name=name, n_train=300, n_eval=50, **extra))
    t2 = build_task(_cfg(name=name, n_train=300, n_eval=50, **extra))
    t3 = build_task(_cfg(name=name, n_train=300, n_eval=50, seed=99, **extra))
    assert len(t1.train) == 300 and len(t1.eval) == 50
    assert not {e.prompt for e in t1.train} & {e.prompt for e in t1.eval}
    assert t1.train == t2.train and t1.eval == t2.eval
    assert t1.train != t3.train


def test_arith_answers_are_right():
    t = build_task(_cfg(name="arith", n_train=50, n_eval=10, num_terms=3, max_operand=9))
    for e in t.train + t.eval:
        expr = e.prompt.rstrip("=")
        # recompute by hand-parsing (never eval): left-to-right + and -
        tokens, num, val, op = [], "", None, "+"
        for ch in expr + "+":
            if ch.isdigit():
                num += ch
                continue
            val = int(num) if val is None else (val + int(num) if op == "+" else val - int(num))
            op, num = ch, ""
        assert str(val) == e.answer


def test_multiply_answers_and_too_small_space():
    t = build_task(_cfg(name="multiply", n_train=20, n_eval=5, digits=2))
    for e in t.train:
        a, b = e.prompt.rstrip("=").split("*")
        assert int(a) * int(b) == int(e.answer) and 10 <= int(a) <= 99
    with pytest.raises(ValueError, match="distinct problems"):
        build_task(_cfg(name="multiply", n_train=200, n_eval=10, digits=1))


def test_sampler_epochs_resume_and_retire():
    t = build_task(_cfg(name="arith", n_train=10, n_eval=2, max_operand=9))
    t.set_seed(3)
    first = [e.key for e in t.sample(7)]
    state = t.state_dict()
    rest = [e.key for e in t.sample(8)]
    assert sorted(first + rest[:3]) == sorted(e.key for e in t.train)  # an epoch is a permutation
    t.load_state_dict(state)
    assert [e.key for e in t.sample(8)] == rest  # resumable position
    retired = {e.key for e in t.train[:9]}
    out = t.sample(5, skip=lambda k: k in retired)
    assert all(e.key == t.train[9].key for e in out)
    with pytest.raises(RuntimeError, match="retired"):
        t.sample(1, skip=lambda k: True)


def test_rewards_registry_and_scoring():
    ex = Example(key="k", prompt="2+2=", answer="4")
    assert REWARDS["correct"]("4", ex) == 1.0 and REWARDS["correct"](" 4 ", ex) == 1.0
    assert REWARDS["correct"]("5", ex) == 0.0 and REWARDS["correct"]("44", ex) == 0.0
    # one final answer only: not the last of several, not a box in a box, nothing over MAX_CHARS (rlx-audit's finds)
    assert REWARDS["correct"]("#### 4\n#### 4", ex) == 1.0 and REWARDS["correct"]("#### 5\n#### 4", ex) == 0.0
    assert REWARDS["correct"]("\\boxed{4}", ex) == 1.0 and REWARDS["correct"]("\\boxed{5 \\boxed{4}}", ex) == 0.0
    assert REWARDS["correct"]("\\boxed{5} \\boxed{4}", ex) == 0.0 and REWARDS["correct"]("x" * 20_001 + "\n#### 4", ex) == 0.0
    assert REWARDS["format"]("-12", ex) == 1.0 and REWARDS["format"]("1a", ex) == 0.0
    t = build_task(_cfg(name="arith", n_train=5, n_eval=2, rewards={"correct": 1.0, "format": 0.5}))
    e = t.train[0]
    per = t.score([e, e], [e.answer, "x"])
    assert per == {"correct": [1.0, 0.0], "format": [1.0, 0.0]}
    assert t.total_reward(per) == [1.5, 0.0]
    with pytest.raises(ValueError, match="nope"):
        build_task(_cfg(name="arith", rewards={"nope": 1.0}))
    with pytest.raises(ValueError, match="unknown task"):
        build_task(_cfg(name="chess"))
    with pytest.raises(ValueError, match="named 'file' now"):  # the file task's old name
        build_task(_cfg(name="jsonl"))


@pytest.mark.integration
def test_jsonl_gsm8k_style_with_math_verify(tmp_path):
    rows = [
        {"question": "Tom has 3 apples and buys 4 more. How many?", "answer": "3+4=7\n#### 7"},
        {"question": "Half of 10?", "answer": "10/2=5\n#### 5"},
    ]
    p = tmp_path / "train.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = _cfg(name="file", train_path=str(p), eval_path=str(p), n_train=0, n_eval=0,
               answer_regex=r"####\s*(.+)\s*$", prompt_template="Q: {question}\nA:", rewards={"math_verify": 1.0})
    t = build_task(cfg)
    assert [e.answer for e in t.train] == ["7", "5"]
    assert t.train[0].prompt.startswith("Q: Tom")
    per = t.score(t.train, ["The answer is \\boxed{7}", "so 6"])
    assert per["math_verify"] == [1.0, 0.0]
    per = t.score(t.train, ["7.0", "5"])
    assert per["math_verify"] == [1.0, 1.0]


@pytest.mark.integration
def test_jsonl_math_style_latex_equivalence(tmp_path):
    p = tmp_path / "math.jsonl"
    p.write_text(json.dumps({"problem": "Simplify 2/4", "solution": "\\frac{1}{2}"}) + "\n")
    t = build_task(_cfg(name="file", train_path=str(p), eval_path=str(p), question_field="problem",
                        answer_field="solution", n_train=0, n_eval=0, rewards={"math_verify": 1.0}))
    assert t.score(t.eval, ["$\\boxed{0.5}$"])["math_verify"] == [1.0]


def test_jsonl_errors_name_the_problem(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.jsonl"):
        build_task(_cfg(name="file", train_path=str(tmp_path / "missing.jsonl"), eval_path="x"))
    p = tmp_path / "d.jsonl"
    p.write_text(json.dumps({"q": "1", "a": "2"}) + "\n")
    with pytest.raises(ValueError, match="question"):
        build_task(_cfg(name="file", train_path=str(p), eval_path=str(p)))


# ---------------------------------------------------------------- real-task scoring (issue 15)

def _math_task(tmp_path, gold: str, rewards=None):
    p = tmp_path / "m.jsonl"
    p.write_text(json.dumps({"problem": "q", "answer": gold}) + "\n")
    return build_task(_cfg(name="file", train_path=str(p), eval_path=str(p), question_field="problem",
                           answer_field="answer", n_train=0, n_eval=0, rewards=rewards or {"math_verify": 1.0}))


@pytest.mark.integration
def test_boxed_answers_with_nested_braces(tmp_path):
    from rlx.tasks.answers import last_boxed

    assert last_boxed(r"so \boxed{\frac{1}{2}}.") == r"\frac{1}{2}"
    assert last_boxed(r"\boxed{1} then \boxed{\sqrt{\frac{a}{b}}}") == r"\sqrt{\frac{a}{b}}"
    assert last_boxed(r"\boxed{\frac{1}{2}") is None  # unclosed
    t = _math_task(tmp_path, r"\frac{1}{2}", {"correct": 1.0, "math_verify": 1.0})
    outs = [r"The answer is \boxed{\frac{1}{2}}", r"\boxed{\frac12}", r"\boxed{0.5}", r"\boxed{\frac{1}{3}}"]
    per = t.score(t.eval * 4, outs)
    assert per["correct"] == [1.0, 0.0, 0.0, 0.0]  # exact match of the boxed content
    assert per["math_verify"] == [1.0, 1.0, 1.0, 0.0]  # equivalence
    assert t.passed(per) == [True, True, True, False]  # val/acc counts any correct phrasing


@pytest.mark.integration
def test_gsm8k_val_acc_counts_a_correct_answer_however_phrased(tmp_path):
    t = _math_task(tmp_path, "10", {"correct": 2.0, "math_verify": 1.0})
    per = t.score(t.eval * 3, [" The answer is 10.", "#### 10", "#### 11"])
    assert per["correct"] == [0.0, 1.0, 0.0] and per["math_verify"] == [1.0, 1.0, 0.0]
    assert t.passed(per) == [True, True, False]


def test_task_rewards_replace_instead_of_merging():
    from tests.conftest import compose

    assert dict(compose(["task=gsm8k"]).task.rewards) == {"stated_answer": 1.0}
    assert dict(compose(["task=math"]).task.rewards) == {"stated_answer": 1.0}
    assert dict(compose([]).task.rewards) == {"correct": 1.0}
    assert dict(compose(["experiment=qerl_gsm8k_7b"]).task.rewards) == {"stated_answer": 2.0}
    with pytest.raises(ValueError, match="task.rewards is empty"):
        build_task(OmegaConf.structured(TaskConfig))


def test_real_tasks_get_a_real_length_budget():
    from tests.conftest import compose

    assert compose([]).rollout.max_new_tokens == 6  # the tiny arith default is unchanged
    assert compose(["task=gsm8k"]).rollout.max_new_tokens >= 256
    assert compose(["task=math"]).rollout.max_new_tokens >= 512
    assert compose(["model=hf", "task=gsm8k", "rollout=vllm"]).rollout.max_new_tokens >= 256


ADVERSARIAL = [
    "9^9^9^9",
    "\\boxed{9^{9^{9^{9}}}}",
    "(x+y+z+1)^{200}",
    "1" * 100_000,
    " " * 100_000 + "x",
    "\\frac{" * 150 + "1" + "}{2}" * 150,
]


@pytest.mark.integration
@pytest.mark.parametrize("text", ADVERSARIAL, ids=["power_tower", "boxed_tower", "expand", "100k_digits",
                                                    "long_space", "frac_150"])
def test_adversarial_completions_are_bounded_and_score_zero(tmp_path, text):
    import time

    from rlx.tasks import verify

    t = _math_task(tmp_path, r"\frac{1}{2}", {"correct": 1.0, "format": 0.1, "math_verify": 1.0})
    verify.configure(2.0)
    t.score(t.eval, ["1/2"])  # the worker is warm (its imports are not part of the bound)
    t.reward_stats()
    t0 = time.time()
    per = t.score(t.eval, [text])
    took = time.time() - t0
    assert took <= 5.0, took
    assert per["math_verify"] == [0.0] and per["correct"] == [0.0]
    stats = t.reward_stats()
    if took > 1.5:  # stopped by the hard bound, and counted
        assert stats["train/reward_timeouts"] == 1
    assert t.score(t.eval, [r"\boxed{\frac{2}{4}}"])["math_verify"] == [1.0]  # the worker is back


def test_deep_nesting_is_refused_not_verified(tmp_path):
    t = _math_task(tmp_path, r"\frac{1}{2}")
    per = t.score(t.eval, ["\\frac{" * 150 + "1" + "}{2}" * 150])
    assert per["math_verify"] == [0.0] and t.reward_stats()["train/reward_refused"] == 1


def test_malformed_jsonl_line_is_named(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text(json.dumps({"question": "a", "answer": "#### 1"}) + "\n" + '{"question": "b", "answer": \n')
    with pytest.raises(ValueError, match=r"bad.jsonl line 2 is not valid JSON"):
        build_task(_cfg(name="file", train_path=str(p), eval_path=str(p), rewards={"math_verify": 1.0}))


def test_reward_weights_can_be_set_from_the_command_line():
    from hydra.errors import ConfigCompositionException

    from tests.conftest import compose

    assert dict(compose(["task.rewards={correct: 1.0, format: 0.5}"]).task.rewards) == {"correct": 1.0, "format": 0.5}
    assert dict(compose(["task.rewards={format: 1.0}"]).task.rewards) == {"format": 1.0}  # replaces the file's set
    assert dict(compose(["task.rewards.correct=2.0"]).task.rewards) == {"correct": 2.0}  # edits it
    with pytest.raises(ConfigCompositionException):
        compose(["task.rewards.correct=abc"])  # still typed: weights are floats
    with pytest.raises(ConfigCompositionException):
        compose(["task.rewardz=1"])  # and the rest of the schema is still closed
