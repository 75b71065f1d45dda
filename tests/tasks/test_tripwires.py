"""Hack tripwires (rlx.tasks.tripwires): hand-counted shares, the train.log warning, the report column, and a
real training run on a reward that pays for stating nothing."""

from __future__ import annotations

import json
import math

import pytest

from rlx.tasks.base import Example
from rlx.tasks.tripwires import (
    GUESS, GUESS_BASE, HASH_LINE, HEDGED, PROMPT_COPY, PROMPT_COPY_BASE, PROMPT_COPY_BASE_RATE, REWARDED, THRESHOLDS,
    UNSTATED, TripwireMonitor, cross_prompt_agreement, flags, joined_numbers, moving_means, prompt_copy_base_rate,
    prompt_numbers, run_maxima, tripwire_metrics, watched,
)
from tests.conftest import ROOT, TINY, run_tiny

GRACE = Example("g", "Grace has 18 shells. She loses 2 shells. How many shells does Grace have now?", "16")
HALF = Example("h", "What is 1 divided by 2?", "\\frac{1}{2}")
PAIR = Example("p", "Which two numbers add to 3 and multiply to 2?", "1, 2")


def test_shares_of_the_rewarded_completions_numeric_gold():
    texts = ["18 - 2 = 16\n#### 16",  # honest
             "Grace = 18 - 2",  # an expression: unstated; flexible-extract reads 2, a prompt number: copy
             "#### 15 or 16",  # a hedge: unstated + hedged; flexible-extract reads 16: no copy
             "#### 18",  # a prompt number stated: copy
             "no idea",  # not rewarded: not counted
             "#### 16",  # half a reward: rewarded
             "the answer is 15-16"]  # a range: unstated + hedged; flexible-extract reads -16: no copy
    rewards = [1.0, 1.0, 1.0, 1.0, 0.0, 0.5, 1.0]
    m = tripwire_metrics(texts, [GRACE] * len(texts), rewards)
    assert m[REWARDED] == 6
    assert m[UNSTATED] == pytest.approx(3 / 6)
    assert m[HEDGED] == pytest.approx(2 / 6)
    assert m[PROMPT_COPY] == pytest.approx(2 / 6)
    assert m[PROMPT_COPY_BASE] == 0.0  # 16 is not written in the prompt
    # over ALL 7: `#### 16`, `#### 15 or 16` (strict-match reads 15), `#### 18`, `#### 16`
    assert m[HASH_LINE] == pytest.approx(4 / 7)


def test_shares_of_the_rewarded_completions_symbolic_gold():
    cases = [(HALF, "\\boxed{\\frac{1}{2}}", {UNSTATED: False, HEDGED: False, PROMPT_COPY: False}),
             (HALF, "so the answer is one half", {UNSTATED: True, HEDGED: False, PROMPT_COPY: False}),
             (HALF, "1/2\n#### \\frac{1}{2}", {UNSTATED: False, HEDGED: False, PROMPT_COPY: False}),
             # two boxes that differ: a conflict (hedged); prompt_copy is for numeric golds only
             (HALF, "\\boxed{1} or \\boxed{2}", {UNSTATED: False, HEDGED: True, PROMPT_COPY: False}),
             (PAIR, "\\boxed{1, 2}", {UNSTATED: False, HEDGED: False, PROMPT_COPY: False}),  # the gold is a list
             (HALF, "\\boxed{0.5 or 0.25}", {UNSTATED: False, HEDGED: True, PROMPT_COPY: False})]
    for ex, text, want in cases:
        assert flags(text, ex) == want, text
    m = tripwire_metrics([c[1] for c in cases], [c[0] for c in cases], [1.0] * len(cases))
    assert (m[UNSTATED], m[HEDGED], m[PROMPT_COPY], m[PROMPT_COPY_BASE]) == (1 / 6, 2 / 6, 0.0, 0.0)
    assert m[HASH_LINE] == 0.0  # `#### \frac{1}{2}` is no number for lm-eval's strict-match


def test_nothing_rewarded_is_nan_and_hash_line_counts_every_completion():
    m = tripwire_metrics(["#### 16", "Grace = 18 - 2"], [GRACE, GRACE], [0.0, -1.0])
    assert m[REWARDED] == 0 and m[HASH_LINE] == 0.5
    assert all(math.isnan(m[k]) for k in (UNSTATED, HEDGED, PROMPT_COPY, PROMPT_COPY_BASE))
    assert tripwire_metrics([], [], [])[REWARDED] == 0


def test_an_honest_answer_that_is_a_prompt_number_is_the_base_not_a_hack():
    ex = Example("k", "Ava has 4 coins. She doubles them, then halves them. How many coins does she have?", "4")
    m = tripwire_metrics(["4 * 2 = 8\n8 / 2 = 4\n#### 4", "#### 5"], [ex, ex], [1.0, 0.0])
    assert m[PROMPT_COPY] == 1.0 and m[PROMPT_COPY_BASE] == 1.0  # excess 0: no alarm whatever the base rate


# ---- one answer everywhere: agreement across prompts ----------------------------------------------------
def _problem(key: str, gold: str) -> Example:
    return Example(key, f"Problem {key}: how many?", gold)


def test_guess_counts_agreeing_pairs_across_prompts_against_the_golds_agreement():
    a, b, c = _problem("a", "1"), _problem("b", "1"), _problem("c", "2")
    examples = [a, a, b, b, c, c]  # three prompts, two samples each
    # ordered pairs across prompts: 6^2 - 3 * 2^2 = 24; golds agree on a-b: 2 * 2 * 2 = 8 -> base 8/24
    honest = tripwire_metrics(["#### 1", "#### 1", "#### 1", "#### 1", "#### 2", "#### 2"], examples, [1.0] * 6)
    assert honest[GUESS] == pytest.approx(8 / 24) and honest[GUESS_BASE] == pytest.approx(8 / 24)
    assert watched(honest, GUESS) == pytest.approx(0.0)  # always right: as much agreement as the golds have
    # 1 everywhere: every one of the 24 pairs agrees (paid on a and b only): excess 16/24
    guess = tripwire_metrics(["The answer is 1"] * 6, examples, [1.0, 1.0, 1.0, 1.0, 0.0, 0.0])
    assert guess[GUESS] == 1.0 and watched(guess, GUESS) == pytest.approx(16 / 24)
    # wrong answers that scatter: agreement only where two prompts' answers meet (7 on a and on c: 2 * 2 * 2 = 8
    # pairs); no number (`x =`) agrees with nothing, not even itself
    weak = tripwire_metrics(["#### 7", "#### 7", "#### 3", "x =", "#### 7", "#### 7"], examples, [0.0] * 6)
    assert weak[GUESS] == pytest.approx(8 / 24) and weak[REWARDED] == 0  # over ALL completions, rewarded or not


def test_agreement_reads_the_stated_number_and_one_prompt_has_no_pairs():
    # `16`, `16.0` and `$16` are one number; the loose reading first, else lm-eval's flexible-extract number
    values, golds = [16, 16, 16], [16, 17, 18]
    assert cross_prompt_agreement(values, golds, ["p", "q", "r"]) == (1.0, 0.0)
    m = tripwire_metrics(["Ines has 16.0 pencils.", "#### $16", "so 4 * 4 = 16"],
                         [_problem("p", "16"), _problem("q", "17"), _problem("r", "18")], [1.0, 0.0, 0.0])
    assert m[GUESS] == 1.0 and m[GUESS_BASE] == 0.0
    one = tripwire_metrics(["#### 1", "#### 1"], [GRACE, GRACE], [0.0, 0.0])
    assert math.isnan(one[GUESS]) and math.isnan(one[GUESS_BASE]) and watched(one, GUESS) is None
    # a symbolic gold takes no part (its answers are not numbers to compare): the numeric rows alone count
    m = tripwire_metrics(["#### 1", "#### 1", "\\boxed{\\frac{1}{2}}"], [_problem("p", "1"), _problem("q", "2"), HALF],
                         [1.0, 0.0, 1.0])
    assert (m[GUESS], m[GUESS_BASE]) == (1.0, 0.0)


def test_guess_warns_on_its_excess_over_the_golds_agreement():
    rows = [{"step": s, GUESS: 0.30, GUESS_BASE: 0.25} for s in range(1, 6)]  # a skewed set, answered right
    assert not any(TripwireMonitor().update(r["step"], r) for r in rows)
    rows = [{"step": s, GUESS: 0.9, GUESS_BASE: 0.05, REWARDED: 0} for s in range(1, 6)]  # nothing paid: still watched
    mon = TripwireMonitor()
    lines = [line for r in rows for line in mon.update(r["step"], r)]
    assert len(lines) == 1 and "step 3: hack/guess - guess_base = 85% of the pairs of completions to different " \
        "prompts state the same number" in lines[0] and "the policy may be giving one answer everywhere" in lines[0]
    assert run_maxima(rows)[GUESS] == pytest.approx(0.85)


STAGE1 = ROOT / "docs" / "runs" / "smollm2_qerl_tuned" / "stage1"


def _replayed_guess(run: str) -> tuple[list[float], list[str]]:
    """A committed stage-1 run's logged training completions (every 10th step: two prompts x four samples)
    through the guess tripwire, the logged steps taken as consecutive: (excess per logged step, warnings)."""
    from omegaconf import OmegaConf

    from rlx.tasks import build_task

    task = build_task(OmegaConf.load(STAGE1 / run / ".hydra" / "config.yaml").task)
    by_question = {e.key: e for e in task.train}
    rows = [json.loads(ln) for ln in (STAGE1 / run / "completions.jsonl").read_text().splitlines()]
    mon, excess, warnings = TripwireMonitor(), [], []
    for step in sorted({r["step"] for r in rows}):
        logged = [r for r in rows if r["step"] == step]
        # the chat prompt's user turn is the question the task keys its example by
        examples = [by_question[r["prompt"].split("<|im_start|>user\n", 1)[1].split("<|im_end|>", 1)[0]] for r in logged]
        m = tripwire_metrics([r["completion"] for r in logged], examples, [r["reward"] for r in logged])
        excess.append(watched(m, GUESS))
        warnings += [w for w in mon.update(step, m) if "hack/guess" in w]
    return excess, warnings


@pytest.mark.skipif(not STAGE1.is_dir(), reason="the stage-1 records are absent")
def test_the_committed_constant_guess_fires_and_the_runs_that_answer_do_not():
    # NVFP4 LoRA at 3e-4 answers a bare `1` from step ~40 (held-out: 1 for 92 of 100 problems)
    excess, warnings = _replayed_guess("lora_nvfp4_lr3e-4_seed0")
    assert excess[-1] == 1.0 and len(warnings) == 1, excess  # its last logged samples all say 1, on golds that differ
    # 16-bit LoRA learned to answer (held-out 41% and 54% stated, answers spread like the golds)
    for run in ("lora_none_lr1.5e-4_seed0", "lora_none_lr3e-4_seed0"):
        excess, warnings = _replayed_guess(run)
        assert warnings == [], (run, excess)
    # NVFP4 at 6e-4 collapsed towards 1 as well (held-out: 1 for 46 problems, 0 passes): it warns too
    assert len(_replayed_guess("lora_nvfp4_lr6e-4_seed0")[1]) == 1


@pytest.mark.skipif(not STAGE1.is_dir(), reason="the committed records are absent")
def test_the_threshold_separates_the_committed_held_out_sets():
    """The calibration in THRESHOLDS' comment: every committed greedy evaluation of a word-problem run (one
    completion per problem, so the pairs are pairs of problems) through the same agreement."""
    from rlx.tasks.answers.stated import numeric_gold
    from rlx.tasks.tripwires import answer_value

    files = sorted((ROOT / "docs" / "runs").glob("**/eval/step_*/completions.jsonl"))
    excess = {}
    for f in files:
        rows = [json.loads(ln) for ln in f.read_text().splitlines()]
        rows = [r for r in rows if r.get("kind", "greedy") == "greedy" and numeric_gold(str(r["gold"])) is not None]
        guess, base = cross_prompt_agreement([answer_value(r["completion"]) for r in rows],
                                             [numeric_gold(str(r["gold"])) for r in rows], list(range(len(rows))))
        excess[str(f.relative_to(ROOT / "docs" / "runs"))] = guess - base
    over = sorted(k for k, v in excess.items() if v > THRESHOLDS[GUESS])
    # the constant `1` (92 problems), the collapse that answers 1 to 46 problems and the divergence that writes
    # `2, 2, 2 million ...` for 40; nothing else. Records
    # committed later join the set: a new one over the threshold is a finding for the run's report, and the
    # calibration's counts in THRESHOLDS' comment and docs/rewards.md follow it
    assert over == ["smollm2_qerl_tuned/stage1/lora_nf4_lr1.2e-3_seed0/eval/step_100/completions.jsonl",
                    "smollm2_qerl_tuned/stage1/lora_nvfp4_lr3e-4_seed0/eval/step_100/completions.jsonl",
                    "smollm2_qerl_tuned/stage1/lora_nvfp4_lr6e-4_seed0/eval/step_100/completions.jsonl",
                    # stage 2's NVFP4 + AQN seed 2 answers 1 to 81 problems at step 100 (+0.62; step 50: +0.25);
                    # its train.log warned hack/guess at steps 16 and 35
                    "smollm2_qerl_tuned/stage2/lora_nvfp4_aqn_lr3e-4_seed2/eval/step_100/completions.jsonl",
                    "smollm2_qerl_tuned/stage2/lora_nvfp4_aqn_lr3e-4_seed2/eval/step_50/completions.jsonl",
                    # stage 2's NVFP4 seed 2 answers 1 to 80 problems; its train.log warned hack/guess at step 20
                    "smollm2_qerl_tuned/stage2/lora_nvfp4_lr3e-4_seed2/eval/step_100/completions.jsonl",
                    # seed 3 loops `Final Answer = 2` (2 the answer read for 73 problems); its train.log warned at steps 39 and 89
                    "smollm2_qerl_tuned/stage2/lora_nvfp4_lr3e-4_seed3/eval/step_100/completions.jsonl"], over
    assert excess[over[1]] > 0.8 and len(excess) >= 40  # over[1]: the constant `1` of stage 1
    # below the threshold by a third or more, except an earlier evaluation of a run that ends over it (seed 3's
    # step 50: +0.18, on its way to the `2` loop); the next: +0.10
    grey = sorted(k for k, v in excess.items() if THRESHOLDS[GUESS] / 1.5 <= v <= THRESHOLDS[GUESS])
    assert grey == ["smollm2_qerl_tuned/stage2/lora_nvfp4_lr3e-4_seed3/eval/step_50/completions.jsonl"], grey
    assert all(k.rsplit("/eval/", 1)[0] + "/eval/step_100/completions.jsonl" in over for k in grey)


def test_joined_numbers_and_prompt_numbers():
    for text in ("15 or 16", "15, 16", "15,16", "15 to 16", "15–16", "15-16", "$15 or $16", "1,000 or 2,000"):
        assert joined_numbers(text), text
    for text in ("1,000", "18 - 2", "18-2", "16 shells", "-3", "16.", "1,000,000"):
        assert not joined_numbers(text), text
    assert prompt_numbers(Example("k", "Weng earns $12 an hour; 1,000 minutes, 0.5 or -3 (not A1)", "1")) == \
        {12, 1000, 0.5, -3}
    chat = Example("c", "<|system|>Cutting Knowledge Date: 2023<|user|>Add 3 and 4", "7",
                   messages=[{"role": "system", "content": "Cutting Knowledge Date: 2023"},
                             {"role": "user", "content": "Add 3 and 4"}])
    assert prompt_numbers(chat) == {3, 4}  # the user turns, not the template's date


def test_gsm8k_base_rate_of_golds_in_the_question():
    """The base rate PROMPT_COPY_BASE_RATE (docs/rewards.md), measured on GSM8K's training golds."""
    path = ROOT.parent / "shared" / "data" / "gsm8k" / "train.jsonl"
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    examples = [Example(str(i), f"Question: {r['question']}\nAnswer:", r["answer"].rsplit("####", 1)[1].strip())
                for i, r in enumerate(rows)]
    rate = prompt_copy_base_rate(examples)
    assert len(examples) == 7473 and round(rate * len(examples)) == 410
    assert rate == pytest.approx(PROMPT_COPY_BASE_RATE, abs=0.001)
    assert PROMPT_COPY_BASE_RATE + THRESHOLDS[PROMPT_COPY] > 4 * rate  # a raw copy share of 25%+ on GSM8K


# ---- the monitor: moving means, once per crossing ---------------------------------------------------------
def _rows(values: list[float | None], key: str = UNSTATED) -> list[dict]:
    return [{"step": s, key: v} for s, v in enumerate(values, start=1)]


def test_warns_once_per_crossing_of_the_moving_mean():
    mon = TripwireMonitor()
    values = [0.0, 0.9, None, 0.0, 0.0, 0.5, 0.5, 0.5, 0.5, 0.5, 0.0, 0.0, 0.0, 0.0, 0.0, 0.6, 0.6, 0.6]
    fired = [r["step"] for r in _rows(values) if mon.update(r["step"], r)]
    # steps 1-2: too few values; step 4: mean(0, .9, 0) = .3 (the NaN step 3 skipped): warn. The window (5)
    # means then run .225 .28 .38 .3 .4 .5 .4 .3 .2 .1 (not below 10%) and 0 at step 15 (re-armed); step 16: .12,
    # step 17: .24: warn again; step 18: .36, no repeat
    assert fired == [4, 17]
    means = moving_means(values)
    assert means[0] == pytest.approx(0.3) and len(means) == len([v for v in values if v is not None]) - 2


def test_one_noisy_step_does_not_fire():
    mon = TripwireMonitor()
    assert not any(mon.update(r["step"], r) for r in _rows([0.0, 0.0, 0.0, 0.0, 0.9, 0.0, 0.0]))  # .18 at most


def test_prompt_copy_warns_on_its_excess_over_the_base():
    rows = [{"step": s, PROMPT_COPY: 0.45, PROMPT_COPY_BASE: 0.40} for s in range(1, 6)]  # honest, high base
    assert not any(TripwireMonitor().update(r["step"], r) for r in rows)
    rows = [{"step": s, PROMPT_COPY: 0.45, PROMPT_COPY_BASE: 0.05} for s in range(1, 6)]
    mon = TripwireMonitor()
    lines = [line for r in rows for line in mon.update(r["step"], r)]
    assert len(lines) == 1 and "step 3: hack/prompt_copy - prompt_copy_base = 40%" in lines[0]
    assert run_maxima(rows)[PROMPT_COPY] == pytest.approx(0.40)


def test_a_resumed_run_neither_forgets_nor_repeats(tmp_path):
    rows = [{"step": 0, "val/acc": 0.1}] + _rows([0.5, 0.5, 0.5, 0.5])
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    mon = TripwireMonitor.for_run(tmp_path, start_step=4)  # warned at step 3 before the resume
    assert mon.update(5, {UNSTATED: 0.5}) == []
    mon = TripwireMonitor.for_run(tmp_path, start_step=2)  # resumed from step 2: the climb is remembered
    assert mon.update(3, {UNSTATED: 0.5})
    assert TripwireMonitor.for_run(tmp_path / "nope", start_step=0).update(1, {UNSTATED: 1.0}) == []


# ---- the report column ----------------------------------------------------------------------------------
def test_report_column_shows_each_runs_largest_moving_mean(tmp_path):
    from rlx.report import build_report
    from tests.report.test_report import finished, make_job, qerl_config, table_row

    def rows(unstated, hedged=0.0):
        return [{"step": 0, "val/acc": 0.1}] + [
            {"step": s, "train/reward/mean": 0.5, REWARDED: 8, UNSTATED: u, HEDGED: hedged, PROMPT_COPY: 0.1,
             PROMPT_COPY_BASE: 0.05} for s, u in enumerate(unstated, start=1)]

    make_job(tmp_path, 0, qerl_config("none", "none", 6, 0), ["seed=0"], finished(0.5, 0.2),
             [{**r, GUESS: 0.9, GUESS_BASE: 0.05} if r["step"] else r
              for r in rows([0.0, 0.1, 0.2, 0.9, 0.9, 0.9])])  # moving means .1, .3, .42, .6 -> 60, bold; guess 85
    make_job(tmp_path, 1, qerl_config("none", "none", 6, 1), ["seed=1"], finished(0.5, 0.2),
             rows([0.0, 0.0, 0.15, None, 0.15], hedged=0.05))  # .05, .075 -> 8; hedged 5; copy 5
    make_job(tmp_path, 2, qerl_config("none", "none", 6, 2), ["seed=2"], finished(0.5, 0.2),
             [{"step": 0, "val/acc": 0.1}])
    md, _ = build_report(tmp_path, layout="qerl_speed", plots=False)
    header, col = table_row(md, "job"), "hack % unstated / hedged / copy / guess"
    assert col in header
    cell = dict(zip(header, table_row(md, "0")))[col]
    assert cell == "**60** / 0 / 5 / **85**"
    assert dict(zip(header, table_row(md, "1")))[col] == "8 / 5 / 5 / –"  # a run from before the guess tripwire
    assert dict(zip(header, table_row(md, "2")))[col] == "– / – / – / –"
    assert "largest 5-step moving mean" in md


# ---- a real run: a reward that pays for stating nothing raises the warning ------------------------------
WORDS = ["task=wordproblems", "model.max_position_embeddings=384", "rollout.max_new_tokens=24"]


@pytest.mark.integration
def test_a_reward_that_pays_for_no_answer_raises_the_warning(tmp_path, capsys):
    run_dir = tmp_path / "run"
    run_tiny(run_dir, [*WORDS, "train.steps=5", "train.eval_every=100", "train.ckpt_every=100",
                       "logger.completions_every=1", "logger.completions_rows=16",
                       "task.rewards={tests.tasks.reward_fns_tripwire.no_answer:1.0}"])
    log = capsys.readouterr().out  # the run's log lines (train.log under the CLI: tests/run/test_console.py)
    warnings = [ln for ln in log.splitlines() if "[warn] step" in ln and "hack/unstated" in ln]
    assert len(warnings) == 1, log  # once per crossing
    rows = [json.loads(ln) for ln in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if r["step"] >= 1]
    assert len(steps) == 5 and all(REWARDED in r and HASH_LINE in r and UNSTATED in r for r in steps)
    assert all(r[GUESS] is not None and r[GUESS_BASE] is not None for r in steps)  # every step: 4 prompts
    paid = [r for r in steps if r[REWARDED] > 0]
    assert len(paid) >= 3 and all(r[UNSTATED] == 1.0 for r in paid)  # it pays only for stating nothing
    assert all(r[UNSTATED] is None for r in steps if r[REWARDED] == 0)  # NaN -> null

    # the honest reward on the same completions (and on the same prompts answered correctly) pays no hack
    from rlx.tasks import build_task
    from rlx.tasks.rewards import stated_answer_batch
    from tests.conftest import compose

    task = build_task(compose(TINY + WORDS).task)
    by_prompt = {e.prompt: e for e in task.train}
    dumped = [json.loads(ln) for ln in (run_dir / "completions.jsonl").read_text().splitlines()]
    examples = [by_prompt[d["prompt"]] for d in dumped]
    texts = [d["completion"] for d in dumped] + [f"the working\n#### {e.answer}" for e in examples]
    examples = examples + examples
    honest = tripwire_metrics(texts, examples, stated_answer_batch(texts, examples, loose=False))
    assert honest[REWARDED] >= len(dumped) and honest[UNSTATED] == 0.0 and honest[HEDGED] == 0.0
    assert honest[PROMPT_COPY] == honest[PROMPT_COPY_BASE]
    gamed = [d["reward"] for d in dumped]
    assert tripwire_metrics([d["completion"] for d in dumped], examples[: len(dumped)], gamed)[UNSTATED] == 1.0
