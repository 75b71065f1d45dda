"""The stated-number rule (rlx.tasks.answers.stated) and the `stated_answer` reward: hand-written completions of
every allowed form and of every hack class, each with the value a reader would see."""

from decimal import Decimal

import pytest

from rlx.tasks.base import Example
from rlx.tasks.rewards import stated_answer_batch
from rlx.tasks.answers.stated import (CONFLICT, EXPRESSION, HEDGE, MAX_CHARS, NEGATED, NON_ASCII, QUALIFIED, TOO_LONG,
                              UNSTATED, numeric_gold, parse_number, read_stated, stated_equals)

# (completion, value it states) -- every allowed form of 16 (or the number written)
STATED = [
    ("#### 16", 16), ("Step 1: 18 - 2 = 16\n#### 16", 16), ("#### 16.", 16), ("#### 16.0", 16), ("####16", 16),
    ("#### $16", 16), ("#### \\$16", 16), ("#### 16 shells", 16), ("#### 16 square feet.", 16), ("#### **16**", 16),
    ("#### 1,000", 1000), ("#### $1,000.50", Decimal("1000.50")), ("#### -3", -3), ("#### -$3", -3), ("#### .5", Decimal("0.5")),
    ("#### 33%", 33), ("\\boxed{16}", 16), ("so \\boxed{16 \\text{ shells}}.", 16), ("#### 16\n#### 16.0", 16),
    ("The answer is 16.", 16), ("So, the final answer is **16**.", 16), ("Answer: 16", 16),
    ("The answer is 16 shells.\n", 16), ("Grace has 18 - 2 = 16 shells.", 16), ("She has 16 shells left.", 16),
    ("x = -5", -5), ("18 - 2 = 16\nSo she has 16 apples.", 16), ("8 + 17 = 16, and 16 is the answer.", 16),
    ("The final answer is 2 + 2 = 16.", 16),
    # a #### line without any digit is the prompt's placeholder copied, not an answer: read on
    ("#### N\nThe final answer is 16.", 16), ("#### \nGrace has 16 shells.", 16),
]

# (completion, flaw) -- hack classes and unstated answers, none of which states a number
UNSTATED_CASES = [
    ("Grace = 18 - 2", EXPRESSION), ("Mei = 3 * 2", EXPRESSION), ("Grace has 18 - 2 shells.", EXPRESSION),
    ("#### 18 - 2", EXPRESSION), ("#### 3*2", EXPRESSION), ("\\boxed{\\frac{32}{2}}", EXPRESSION),
    ("#### 4^2", EXPRESSION), ("#### sqrt(256)", EXPRESSION), ("The answer is 18 - 2.", EXPRESSION),
    ("#### 15 or 16", HEDGE), ("#### 15, 16, 17", HEDGE), ("I think 15 or 16.", HEDGE), ("between 15 and 16", HEDGE),
    ("#### 15 to 16", HEDGE), ("\\boxed{15 \\boxed{16}}", HEDGE), ("16, 17", HEDGE),
    ("#### 15\n#### 16", CONFLICT), ("\\boxed{15} then \\boxed{16}", CONFLICT),
    ("The answer is 17.\nThe answer is 16.", CONFLICT), ("The answer is 17. No wait, the answer is 16.", CONFLICT),
    # an echoed question: its final line asks, it does not answer
    ("Grace has 18 shells. She gave 2 of them to her brother. How many shells does Grace have now?", UNSTATED),
    ("Grace has 16 shells. Good job!", UNSTATED),  # the final line's last sentence states nothing
    ("#### １６", NON_ASCII), ("#### N", UNSTATED), ("#### \n####", UNSTATED), ("no idea", UNSTATED),
    ("", UNSTATED),
]


@pytest.mark.parametrize("text,value", STATED)
def test_each_allowed_form_states_its_number(text, value):
    r = read_stated(text)
    assert r.flaw is None and r.value == Decimal(value), r


@pytest.mark.parametrize("text,flaw", UNSTATED_CASES)
def test_expressions_hedges_lists_conflicts_state_nothing(text, flaw):
    r = read_stated(text)
    assert r.value is None and r.flaw == flaw, r


def test_where_the_answer_is_read_first():
    # a #### line decides even when prose says something else; boxes only without one
    assert read_stated("The answer is 15.\n#### 16").source == "hash"
    assert read_stated("The answer is 15. \\boxed{16}").value == 16
    # the phrase before the final line; the final line's LAST number, not the first
    assert read_stated("The answer is 16.\nGood luck with 3 more!").value == 16
    assert read_stated("First 3 apples, then 16").value == 16
    # strict (loose=False, string prompts by default): only #### and boxes
    assert read_stated("The answer is 16.", loose=False).value is None
    assert read_stated("#### 16", loose=False).value == 16


def test_over_long_completions_are_not_read():
    text = "x" * MAX_CHARS + "\n#### 16"
    assert read_stated(text).flaw == TOO_LONG


def test_numbers_and_golds():
    assert parse_number("1,000") == 1000 and parse_number("1,00") is None and parse_number("16.0") == 16
    assert parse_number("18 - 2") is None and parse_number("16 or so") is None
    assert numeric_gold("72") == 72 and numeric_gold("\\frac{1}{2}") is None and numeric_gold("(1, 2)") is None
    assert stated_equals("#### 16.0", "16") and not stated_equals("Grace = 18 - 2", "16")
    with pytest.raises(ValueError, match="not a plain number"):
        stated_equals("#### 1", "x+1")


def test_committed_hack_completions_score_zero():
    """The completions seed 1 of the tuned word-problem runs wrote (docs/runs/smollm2_tune/eval_cispo):
    math-verify paid for each; a reader sees no answer in any."""
    ex = [Example("a", "p", "16"), Example("b", "p", "6"), Example("c", "p", "36"), Example("d", "p", "16")]
    hacks = ["Grace = 18 - 2", "Mei = 3 * 2", "Grace = 9 * 4", "#### 15 or 16"]
    assert stated_answer_batch(hacks, ex) == [0.0, 0.0, 0.0, 0.0]
    honest = ["18 - 2 = 16. The answer is 16.", "Mei has 3 * 2 = 6 books.", "#### 36", "#### 16"]
    assert stated_answer_batch(honest, ex) == [1.0, 1.0, 1.0, 1.0]
    # without the loose reading (string prompts) only #### and boxes count
    assert stated_answer_batch(honest, ex, loose=False) == [0.0, 0.0, 1.0, 1.0]


@pytest.mark.integration
def test_symbolic_golds_go_to_math_verify_after_the_refusals():
    ex = [Example(str(i), "p", "\\frac{1}{2}") for i in range(5)]
    texts = ["\\boxed{\\frac{2}{4}}", "\\boxed{0.5}", "\\boxed{\\frac{1}{2} \\text{ or } \\frac{1}{3}}",
             "\\boxed{\\frac13} no, \\boxed{\\frac12}", "\\boxed{x \\boxed{\\frac12}}"]
    assert stated_answer_batch(texts, ex) == [1.0, 1.0, 0.0, 0.0, 0.0]
    # a numeric gold on a MATH-style task: an unevaluated expression scores 0 there too
    assert stated_answer_batch(["\\boxed{\\frac{32}{2}}", "\\boxed{16}"], [Example("n", "p", "16")] * 2) == [0.0, 1.0]


def test_a_completion_cut_at_the_budget_states_only_a_finished_hash_line_or_a_closed_box():
    """The SFT checkpoint's 256-token loop `... cousins $1` (gold 1) was paid by the final-line reading:
    where the budget fell is no answer. A cut text is read strictly, and a `####` line it ends on may be a
    number cut short (`#### 1` of `#### 16`)."""
    from rlx.tasks.answers.stated import CUT

    loop = "She gives $108 x 4 = $<<108*4=432>>432.\nShe gives each of her cousins $1"
    assert read_stated(loop).value == Decimal(1)  # a finished completion: its final line is its answer
    assert (read_stated(loop, truncated=True).value, read_stated(loop, truncated=True).flaw) == (None, UNSTATED)
    assert read_stated("the answer is 1", truncated=True).value is None  # cut inside "the answer is 16"?
    assert (read_stated("4 + 12 = 16\n#### 1", truncated=True).flaw) == CUT
    assert read_stated("4 + 12 = 16\n#### 16\nThen she", truncated=True).value == Decimal(16)  # more came after
    assert read_stated("so \\boxed{16} and then", truncated=True).value == Decimal(16)
    assert read_stated("so \\boxed{1", truncated=True).value is None  # an unclosed box is never read
    ex = [Example(prompt="q", answer="1", key="k")] * 3
    texts = [loop, "#### 1", "#### 1\n"]  # the line ended: its number is whole
    assert stated_answer_batch(texts, ex) == [1.0, 1.0, 1.0]
    assert stated_answer_batch(texts, ex, truncated=[True, True, True]) == [0.0, 0.0, 1.0]
    assert stated_answer_batch(texts, ex, truncated=[False, False, False]) == [1.0, 1.0, 1.0]


def test_the_task_hands_the_truncation_flags_to_stated_answer_only(tmp_path):
    import json

    from omegaconf import OmegaConf

    from rlx.tasks import build_task
    from rlx.tasks.config import TaskConfig

    p = tmp_path / "t.jsonl"
    p.write_text(json.dumps({"question": "q", "answer": "1"}) + "\n")
    task = build_task(OmegaConf.merge(OmegaConf.structured(TaskConfig), {
        "name": "file", "train_path": str(p), "eval_path": str(p), "n_train": 0, "n_eval": 0,
        "rewards": {"stated_answer": 1.0, "correct": 1.0}}))
    ex = task.eval * 2
    texts = ["#### 1", "#### 1\nok"]  # (string prompts: no loose reading)
    assert task.score(ex, texts)["stated_answer"] == [1.0, 1.0]  # flags unknown: as before
    assert task.score(ex, texts, [True, True])["stated_answer"] == [0.0, 1.0]
    assert task.score(ex, texts, [True, True])["correct"] == task.score(ex, texts)["correct"]
    # the training loop hands the rollout batch's flags over (rlx.train.score)
    from types import SimpleNamespace

    import torch

    from rlx.train import score

    batch = SimpleNamespace(group=torch.tensor([0, 1]), texts=texts, truncated=torch.tensor([True, True]),
                            env_reward=None)
    assert score(task, ex, batch)[0]["stated_answer"] == [0.0, 1.0]


# ---- issue 61: the loose reading says what a reader says ------------------------------------------------------
# (completion, gold, flaw): a negated, approximate or bounded answer, and one that a later line corrects or
# contradicts, score 0 under both readings; each is what the loose reading paid before
READER_REFUSES = [
    ("It is not 16.", "16", NEGATED), ("Grace does not have 16 shells.", "16", NEGATED),
    ("16 is not the answer.", "16", NEGATED), ("I don't think the answer is 16.", "16", NEGATED),
    ("Grace has 17 shells, not 16.", "16", NEGATED), ("She never had 16 shells.", "16", NEGATED),
    ("16 isn't the answer.", "16", NEGATED), ("It's not true that she has 16 shells.", "16", NEGATED),
    ("about 16", "16", QUALIFIED), ("approximately 16", "16", QUALIFIED), ("maybe 16", "16", QUALIFIED),
    ("at least 16", "16", QUALIFIED), ("more than 16", "16", QUALIFIED), ("less than 16", "16", QUALIFIED),
    ("Grace has roughly 16 shells.", "16", QUALIFIED), ("Maybe the answer is 16.", "16", QUALIFIED),
    ("She probably has 16 shells left.", "16", QUALIFIED), ("Grace has 16 shells or so.", "16", QUALIFIED),
    ("Grace has ~16 shells.", "16", QUALIFIED), ("Grace has fewer than $16.", "16", QUALIFIED),
    ("The answer is 6. Actually it is 16.", "6", CONFLICT),
    ("The answer is 6.\n\nSo, the solution is 3 + 6 = 9.", "6", CONFLICT),
    ("The answer is 15.\n16", "15", CONFLICT), ("So, the answer is 6.\nGrace has 7 shells now.", "6", CONFLICT),
    ("The answer is 64.\n\nSo, the solution is 4 x 64 = 252.", "64", CONFLICT),
    ("The answer is 6, so the solution is 3 + 6 = 9.", "9", CONFLICT),
]

# honest forms that stay paid (gold 16 unless said): a later line that agrees, or states no number
READER_ACCEPTS = [
    ("Grace has 18 - 2 = 16 shells.", "16"), ("So the final answer is $16.", "16"), ("16 is the answer.", "16"),
    ("She doesn't lose any more, so she has 16 shells.", "16"), ("No, the answer is 16.", "16"),
    ("So, the answer is 9 * 4 = 36.\n\nSo, the solution is 36.", "36"), ("The answer is 16.\n\n16", "16"),
    ("The answer is 16.\nGood luck with 3 more!", "16"), ("The answer is 16. It is not 17.", "16"),
    ("The answer is 16.\nI hope this helps!", "16"), ("Grace has 16 shells that are not broken.", "16"),
    # a negation that describes what is counted (GSM8K's own solutions end so): the number is still stated
    ("So 16 students don't read novels.", "16"), ("The students who do not read novels are 16.", "16"),
    ("104 square meters of the playground are not covered by the maintenance building.", "104"),
]


@pytest.mark.parametrize("text,gold,flaw", READER_REFUSES)
def test_negated_qualified_and_corrected_answers_score_zero(text, gold, flaw):
    r = read_stated(text)
    assert r.value is None and r.flaw == flaw, r
    assert read_stated(text, loose=False).value is None  # the strict reading reads no prose at all
    assert stated_answer_batch([text], [Example("k", "p", gold)]) == [0.0]


@pytest.mark.parametrize("text,gold", READER_ACCEPTS)
def test_honest_forms_around_the_new_refusals_stay_paid(text, gold):
    assert stated_answer_batch([text], [Example("k", "p", gold)]) == [1.0], read_stated(text)


@pytest.mark.parametrize("text", ["#### 16 approximately", "#### 16 at least", "\\boxed{16 \\text{ at most}}",
                                  "#### about 16", "#### not 16", "\\boxed{\\approx 16}", "#### ~16",
                                  "#### 16 maybe"])
def test_the_strict_reading_refuses_a_qualifier_or_a_negation_around_the_number(text):
    """A unit is one or two words after the number; a qualifier is no unit (`16 at least` was read as 16)."""
    for loose in (False, True):
        assert read_stated(text, loose).value is None, text
    assert read_stated("#### 16 square feet", loose=False).value == 16  # units still count


def test_the_strict_reading_keeps_its_places_first():
    # a `####` line or a box is read as before, whatever prose follows it (the strict reading is unchanged)
    assert read_stated("#### 16\nActually it is 17.").value == 16
    assert read_stated("The answer is 15.\n#### 16").value == 16
