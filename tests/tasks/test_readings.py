"""lm-eval's GSM8K readings as rlx reproduces them (rlx.tasks.answers.readings), with hand-worked values; the
cross-check against lm-eval's own code is tests/scripts/test_lm_eval_check.py."""

import pytest

from rlx.tasks.answers.readings import (FLEXIBLE, INVALID, MATH_VERIFY, STRICT, exact_match, flexible_extract, read,
                               readings_for, strict_match)
from rlx.tasks.base import Example


@pytest.mark.parametrize("text,strict,flexible", [
    ("#### 16", "16", "16"),
    ("Grace = 18 - 2", INVALID, "2"),  # the hack: flexible reads the 2 (wrong), strict nothing
    ("#### 16\n#### 15", "16", "15"),  # strict keeps lm-eval's FIRST match; flexible the last number
    ("####16", INVALID, "16"),  # strict needs the one space
    ("#### $1,000.", INVALID, "$1,000."),  # strict's class has no $; flexible's takes $, commas and the stop
    ("#### 1,000.", "1,000.", "1,000."),  # (exact_match then drops them)
    ("The answer is 8.", INVALID, "8."),  # '8.' is a 2-character run of the first group
    ("The answer is 8", INVALID, "8"),  # a lone digit: the second group
    ("no number", INVALID, INVALID),
    ("#### -3.5 apples", "-3.5", "-3.5"),
])
def test_strict_and_flexible_extractions(text, strict, flexible):
    assert strict_match(text) == strict and flexible_extract(text) == flexible


def test_exact_match_normalizes_as_gsm8k_yaml_says():
    # `,` and `$` removed, everything up to '#### ' removed, a final '.' removed, case ignored
    assert exact_match("1,000.", "1000") and exact_match("$1,000.", "1000")
    assert exact_match("16", "Step 1...\n#### 16")  # a full GSM8K solution as the gold
    assert not exact_match("16.0", "16")  # no numeric equality: lm-eval compares strings
    assert not exact_match(INVALID, "16")


def test_readings_are_chosen_by_the_golds_not_the_reward():
    numeric = [Example("a", "p", "16"), Example("b", "p", "1,000")]
    symbolic = numeric + [Example("c", "p", "\\frac{1}{2}")]
    assert readings_for(numeric) == [STRICT, FLEXIBLE]
    assert readings_for(symbolic) == [MATH_VERIFY]
    assert readings_for(numeric, [FLEXIBLE]) == [FLEXIBLE]
    with pytest.raises(ValueError, match="unknown reading"):
        readings_for(numeric, ["strict"])


def test_read_gives_answer_and_verdict_per_completion():
    out = read([STRICT, FLEXIBLE], ["#### 16", "Grace = 18 - 2", "16 apples"], ["16", "16", "16"])
    assert [r["passed"] for r in out[STRICT]] == [True, False, False]
    assert [r["passed"] for r in out[FLEXIBLE]] == [True, False, True]
    assert out[FLEXIBLE][1]["answer"] == "2"
