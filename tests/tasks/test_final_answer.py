"""math_verify verifies the final answer the task's convention names (after `####`, else the last
`\\boxed{}`, else the whole text), as ONE expression (issue 31): real GSM8K gold solutions score 1, and
expressions whose pieces equal the gold (nested and compound fractions) score 0."""

import json
import random
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from rlx.tasks.config import TaskConfig
from rlx.tasks import build_task
from rlx.tasks.answers import final_answer, unwrap
from rlx.tasks.rewards import REWARDS
from rlx.tasks.verify import PROSE, WHOLE, candidates

GSM8K = Path("/work/shared/data/gsm8k/train.jsonl")


def _task(tmp_path, gold: str, rewards=None):
    p = tmp_path / "m.jsonl"
    p.write_text(json.dumps({"problem": "q", "answer": gold}) + "\n")
    return build_task(OmegaConf.merge(OmegaConf.structured(TaskConfig), {
        "name": "file", "train_path": str(p), "eval_path": str(p), "question_field": "problem",
        "answer_field": "answer", "n_train": 0, "n_eval": 0, "rewards": rewards or {"math_verify": 1.0}}))


def _scores(t, completions):
    return t.score(t.eval * len(completions), completions)["math_verify"]


@pytest.mark.integration
@pytest.mark.skipif(not GSM8K.is_file(), reason=f"needs the real GSM8K training split at {GSM8K}")
@pytest.mark.parametrize("reward", ["stated_answer", "math_verify"])  # gsm8k's default, and the old rule
def test_every_real_gsm8k_gold_solution_scores_one(tmp_path, reward):
    from tests.conftest import compose

    cfg = compose(["task=gsm8k", f"task.train_path={GSM8K}", f"task.eval_path={GSM8K}", f"task.rewards={{{reward}: 1.0}}"])
    t = build_task(cfg.task)
    assert len(t.train) == sum(1 for ln in GSM8K.read_text().splitlines() if ln.strip()) > 7000
    per = t.score(t.train, [e.solution for e in t.train])[reward]
    assert [e.key for e, s in zip(t.train, per) if s != 1.0] == []
    # and through math-verify itself (not the exact-string shortcut): 200 solutions, their answers rewritten
    # as the decimal a policy may write ("72" -> "72.0"; "0.5" -> "0.50")
    sample = random.Random(0).sample(t.train, 200)
    rewritten = [e.solution.rsplit("####", 1)[0] + "#### " + (e.answer.replace(",", "") + (".0" if "." not in e.answer
                 else "0")) for e in sample]
    per = t.score(sample, rewritten)[reward]
    assert [(e.answer, c[-20:]) for e, c, s in zip(sample, rewritten, per) if s != 1.0] == []


@pytest.mark.integration
def test_the_two_gsm8k_solutions_of_the_issue_score_one(tmp_path):
    # main handed the whole solution to math-verify, which picked another expression (33.333%): the end of
    # row 1984 of the real training split
    t = _task(tmp_path, "33")
    tail = "multiply by 100% to express the answer as a percentage: $9 / $27 * 100% = 33.333%, which rounds down to 33%"
    assert _scores(t, [tail + "\n#### 33", tail + "\n#### 33.0", tail + "\n\\boxed{33}"]) == [1.0, 1.0, 1.0]
    t = _task(tmp_path, "6")
    assert _scores(t, ["It costs 4+2 = $<<4+2=6.00>>6.00\n#### 6", "4+2 = $<<4+2=6.00>>6.00\n#### 6.00"]) == [1.0, 1.0]


def _nested(k: int, top: str = "1") -> str:
    """\\frac{top}{\\frac{1}{...\\frac{1}{2}}} with k fractions above the innermost 1/2 (brace depth k + 1)."""
    return "".join(f"\\frac{{{top if i == 0 else 1}}}{{" for i in range(k)) + "\\frac{1}{2}" + "}" * k


@pytest.mark.integration
def test_nested_fractions_whose_inner_piece_is_the_gold_score_zero(tmp_path):
    t = _task(tmp_path, "0.5")
    wrong = [
        _nested(1),  # 1 / (1/2) = 2
        _nested(1, "3"),  # 3 / (1/2) = 6
        _nested(19),  # 19 reciprocals of 1/2 = 2, brace depth 20 (under the cap of 24)
        "#### " + _nested(1), "\\boxed{" + _nested(1, "3") + "}",
        "so the answer is " + _nested(1),  # undelimited LaTeX in prose: never a piece of it
        "$The answer is " + _nested(1) + "$",  # math-verify's 'answer' anchor took the inner fraction here
    ]
    assert _scores(t, wrong) == [0.0] * len(wrong)
    right = [_nested(0), _nested(18), "#### 0.5", "\\boxed{\\frac{2}{4}}", "The answer is $\\frac{1}{2}$.",
             " The answer is 0.5."]  # 18 reciprocals of 1/2 = 1/2: the whole expression is what counts
    assert _scores(t, right) == [1.0] * len(right)


@pytest.mark.integration
def test_compound_expressions_whose_pieces_equal_the_gold_score_zero(tmp_path):
    t = _task(tmp_path, "\\frac{1}{2}")
    wrong = ["1+\\frac{1}{2}", "\\frac{1}{2}+1", "2\\cdot\\frac{1}{2}", "\\sqrt{\\frac{1}{2}}", "\\frac{1}{2}^{2}",
             "#### 1 + 1/2", "\\boxed{3/(1/2)}", "x^{\\frac{1}{2}}"]
    assert _scores(t, wrong) == [0.0] * len(wrong)
    assert _scores(t, ["\\sqrt{\\frac{1}{4}}", "#### 1 - 1/2", "\\boxed{0.5}", "x = \\frac{1}{2}"]) == [1.0] * 4
    t = _task(tmp_path, "2")
    assert _scores(t, ["2\\sqrt{2}", "#### 2^{2}", "\\boxed{2x}"]) == [0.0] * 3  # plain parsing took the 2
    t = _task(tmp_path, "2\\sqrt{2}")  # the gold is read whole too (plain parsing reads it as 2)
    assert _scores(t, ["#### 2", "\\boxed{\\sqrt{8}}"]) == [0.0, 1.0]


def test_the_final_answer_convention():
    assert final_answer("work\n#### 33") == "33"
    assert final_answer("a \\boxed{1} b \\boxed{\\frac{1}{2}} c") == "\\frac{1}{2}"
    assert final_answer("#### 3 and \\boxed{4}") == "3 and \\boxed{4}"  # '####' first
    assert final_answer(" just 7 ") == "just 7"
    assert candidates("33", "33") == [(WHOLE, "33")]
    assert candidates("6.", "6") == [(WHOLE, "6")]  # a sentence's full stop
    assert candidates("33%", "33") == [(WHOLE, "33%"), (WHOLE, "33")]  # a whole-number gold: the % may go
    assert candidates("The answer is 10.", "10") == [(PROSE, "The answer is 10")]  # no LaTeX: math-verify extracts
    assert candidates("The answer is $\\frac{1}{2}$.", "0.5") == [(WHOLE, "\\frac{1}{2}")]  # the last delimited math
    assert candidates("so it is \\frac{1}{2}", "0.5") == []  # undelimited LaTeX in prose: nothing verifiable
    assert candidates("\\frac{1}{2}}", "0.5") == [] and candidates("", "1") == []  # unbalanced braces, nothing


# (completion, the last box, the top-level boxes): a box counts once it closes, nested boxes give the inner one;
# math-verify (the reference for boxes: lm-eval's GSM8K reads none) takes that same last box from each completion
BOXES = [(r"so \boxed{5 \boxed{4}}", "4", ["5 \\boxed{4}"]),
         (r"\boxed{1} then \boxed{2", "1", ["1"]),  # the last one left open: the earlier one
         (r"\boxed{1 then \boxed{2}", "2", ["2"]),  # the first one left open: the closed one inside it
         (r"} \boxed{3} {", "3", ["3"])]  # stray braces outside boxes


@pytest.mark.parametrize("text,last,top", BOXES)
def test_boxes_are_read_as_math_verify_reads_them(text, last, top):
    from math_verify import parse

    from rlx.tasks.answers import last_boxed, top_level_boxes

    assert last_boxed(text) == last and top_level_boxes(text) == top
    assert str(parse(text, parsing_timeout=None)[-1]) == last


def test_closed_boxes_in_order_and_none_unclosed():
    from rlx.tasks.answers import last_boxed, top_level_boxes

    assert top_level_boxes(r"\boxed{1} then \boxed{2}") == ["1", "2"] and last_boxed(r"\boxed{1} then \boxed{2}") == "2"
    assert top_level_boxes(r"\boxed{\frac{1}{2}") == [] and last_boxed(r"\boxed{\frac{1}{2}") is None


def test_format_accepts_ascii_digits_only():
    from rlx.tasks.base import Example

    ex = Example(key="k", prompt="1+1=", answer="2")
    fmt = REWARDS["format"]
    assert [fmt(c, ex) for c in ["12", " -3 ", "\uff11\uff12", "\u0661\u0662", "\u0967", "1\u00a02"]] == [
        1.0, 1.0, 0.0, 0.0, 0.0, 0.0]  # fullwidth, Arabic-Indic and Devanagari digits; a no-break space inside


@pytest.mark.integration
def test_markdown_emphasis_around_the_answer_is_not_part_of_it(tmp_path):
    # SmolLM2's chat answers come bold: main handed "**18**" to math-verify, which reads no number in it (0)
    t = _task(tmp_path, "18")
    right = ["#### **18**", "#### __18__", "#### *18*", "#### _18_", "#### ***18***", "#### **18**.", "#### **18.**",
             "\\boxed{**18**}", "#### **18.0**"]
    assert _scores(t, right) == [1.0] * len(right)
    assert _scores(t, ["#### **19**", "#### **18", "#### 1_8"]) == [0.0] * 3  # another number; unclosed; a subscript
    # wrappers only, matching at both ends: nothing inside a number or an expression is touched
    assert [unwrap(a) for a in ["**18**", "***18***.", "**_18_**", " _5_ ", "1_000", "2*3*4", "*2*3", "** 18 **", "x_1"]] == [
        "18", "18", "18", "5", "1_000", "2*3*4", "*2*3", "** 18 **", "x_1"]


@pytest.mark.integration
def test_a_percent_sign_is_dropped_only_where_it_cannot_change_the_value(tmp_path):
    t = _task(tmp_path, "0.5")  # 0.5% is 0.005, not 0.5: main tried "0.5" without its % and scored it 1
    assert _scores(t, ["#### 0.5%", "#### 0.5\\%", "#### **0.5%**", "#### 0.5"]) == [0.0, 0.0, 0.0, 1.0]
    assert candidates("0.5%", "0.5") == [(WHOLE, "0.5%")]
    t = _task(tmp_path, "33")  # a whole-number gold (GSM8K's "what percent"): 33% is the 33 asked for
    assert _scores(t, ["#### 33%", "#### 33.0\\%", "#### **33%**", "#### 34%"]) == [1.0, 1.0, 1.0, 0.0]
    t = _task(tmp_path, "12.5%")  # a percentage gold: compared with a percentage answer, both without their %
    assert _scores(t, ["#### 12.5%", "#### 12.50%", "#### 12.5 %", "#### 13%"]) == [1.0, 1.0, 1.0, 0.0]
