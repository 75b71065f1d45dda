"""rlx.eval.guess: how much of a held-out score one repeated answer explains. Hand-counted sets, then the
committed word-problem records where a policy learned to answer 1."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from rlx.eval.guess import answer_spread, row_answer, spreads_of_rows

RUNS = Path(__file__).resolve().parents[2] / "docs" / "runs"
# ten problems: the gold 1 three times, then 2..8 once each
GOLDS = ["1", "1", "1", "2", "3", "4", "5", "6", "7", "8"]


def test_one_answer_everywhere_scores_the_share_of_its_gold_and_nothing_beyond():
    s = answer_spread(["1"] * 10, GOLDS, [g == "1" for g in GOLDS])
    # 3 passes, all three the answer 1; the other 7 problems (gold not 1): 0 of 7
    assert (s.mode, s.given, s.gold, s.passes, s.mode_passes, s.top_gold) == ("1", 10, 3, 3, 3, "1")
    assert s.beyond == 0.0 and s.suspect
    assert s.cell() == "**1 x 10 (gold of 3), 3 of 3 passes**"


def test_a_solver_is_not_marked_and_its_beyond_counts_the_other_problems():
    # right on problems 0, 3, 4, 5, 6 (one gold-1 problem and four others); wrong answers all differ
    answers = ["1", "9", "10", "2", "3", "4", "5", "11", "12", "13"]
    passed = [a == g for a, g in zip(answers, GOLDS)]
    s = answer_spread(answers, GOLDS, passed)
    # every answer given once: the first seen (1) is the mode; 1 of 5 passes is it; beyond: 4 of the 7 non-1 golds
    assert (s.mode, s.given, s.gold, s.passes, s.mode_passes) == ("1", 1, 3, 5, 1)
    assert s.beyond == pytest.approx(4 / 7) and not s.suspect


def test_one_number_written_several_ways_is_one_answer_and_no_answer_is_no_vote():
    # `4.`, `4.0` and `**4**` are 4 (flexible-extract keeps a trailing full stop); "[invalid]" and None are no answer
    answers = ["4.", "4.0", "**4**", "[invalid]", None, "[invalid]", "[invalid]", "2", "3", "5"]
    s = answer_spread(answers, GOLDS, [False] * 10)
    assert (s.mode, s.given, s.gold) == ("4", 3, 1)
    # given to 3 of 10 (>= 15%) and 3x its 1 gold: marked even with no pass
    assert s.suspect and s.cell().startswith("**4 x 3 (gold of 1), 0 of 0 passes")
    assert answer_spread([None] * 10, GOLDS, [False] * 10).cell() == "–"


def test_the_mark_needs_a_pattern_not_one_pass_or_an_answer_as_common_as_its_gold():
    # one pass that is the mode (1 of 1): not "over half of at least 2"
    s = answer_spread(["1", "9", "10", "11", "12", "13", "14", "15", "16", "17"], GOLDS, [True] + [False] * 9)
    assert s.mode_passes == 1 and not s.suspect
    # 1 given 3 times, the gold of 3 (not twice as often); its 3 passes are 3 of 6
    answers = ["1", "1", "1", "2", "3", "4", "99", "98", "97", "96"]
    s = answer_spread(answers, GOLDS, [a == g for a, g in zip(answers, GOLDS)])
    assert (s.given, s.gold, s.mode_passes, s.passes) == (3, 3, 3, 6) and not s.suspect


def test_fractions_show_as_decimals_and_mismatched_lengths_are_refused():
    s = answer_spread(["3/2", "1.5", "1.50"], ["1.5", "2", "3"], [True, True, True])
    assert (s.mode, s.given, s.gold) == ("1.5", 3, 1)
    with pytest.raises(ValueError, match="one answer, gold and verdict per problem"):
        answer_spread(["1"], ["1", "2"], [True, False])


def test_rows_read_the_flexible_extract_number_per_set():
    rows = [{"set": "a", "kind": "greedy", "gold": "1", "passed": True, "answer": "The answer is 1",
             "readings": {"flexible-extract": {"answer": "1", "passed": True}}},
            {"set": "a", "kind": "sample", "gold": "1", "passed": False, "answer": "7", "readings": {}},
            {"set": "b", "kind": "greedy", "gold": "2", "passed": False, "answer": "3", "readings": None}]
    assert row_answer(rows[0]) == "1" and row_answer(rows[2]) == "3"
    spreads = spreads_of_rows(rows)
    assert list(spreads) == ["a", "b"] and spreads["a"].given == 1 and spreads["a"].passes == 1
    assert math.isnan(spreads["b"].beyond)  # the only problem's gold is the most common gold
    with pytest.raises(ValueError, match="row 1 has no gold"):
        spreads_of_rows([{"kind": "greedy", "passed": True, "answer": "1"}])


def test_the_flexible_reading_is_compared_as_lm_eval_compares_it():
    # flexible-extract's raw match keeps a separator: "2, 2, 2 million" -> `2,`; lm-eval's exact_match drops
    # gsm8k.yaml's regexes_to_ignore (`,`, `$`, a trailing `.`) before comparing, so `2,`, `$2.` and `2` are 2
    def row(raw):
        return {"kind": "greedy", "gold": "2", "passed": False, "answer": "x",
                "readings": {"flexible-extract": {"answer": raw, "passed": False}}}

    assert [row_answer(row(a)) for a in ("2,", "$2.", "2", "1,000", "[invalid]", "....", "$,")] == \
        ["2", "2", "2", "1000", None, None, None]  # flexible-extract's `[$0-9.,]{2,}` also matches no digit
    s = spreads_of_rows([row("2,"), row("$2."), row("2"), row("3")])["default"]
    assert (s.mode, s.given, s.gold) == ("2", 3, 4)


def _spread(rel: str):
    f = RUNS / rel / "completions.jsonl"
    if not f.is_file():
        pytest.skip(f"{f} is not in this checkout")
    return spreads_of_rows([json.loads(ln) for ln in f.read_text().splitlines()])["default"]


def test_the_committed_aqn_run_scores_by_answering_1_and_an_honest_run_does_not():
    # NVFP4 LoRA + AQN at lr 6e-4 (issue 44, stage 1): "The answer is 1" and the like; its 5 held-out passes
    # are the 5 it answered 1 whose gold is 1, and it passes none of the 85 problems whose gold is not 1
    aqn = _spread("smollm2_qerl_tuned/stage1/lora_nvfp4_aqn_lr6e-4_seed0/eval/step_100")
    assert (aqn.mode, aqn.passes, aqn.mode_passes, aqn.top_gold, aqn.beyond) == ("1", 5, 5, "1", 0.0) and aqn.suspect
    # CISPO on the same problems (issue 43, seed 0): 42 passes, 4 of them its most common answer
    cispo = _spread("smollm2_wp_stated/cispo/seed0/eval/step_100")
    assert (cispo.passes, cispo.mode_passes) == (42, 4) and not cispo.suspect
    assert cispo.beyond == pytest.approx(40 / 85)  # 2 of its 42 passes are golds of 1
