"""NExt's claim seed by seed on the real-model sweep (rlx.report.next.paired_tables / next_per_seed_tables): the
paired differences, their verdicts and the steps saved, on hand-made runs with hand-computed values."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlx.report.next import jump_effect_table, jump_effects, paired_tables, next_per_seed_tables, step_savings
from rlx.run.records import Run


def run(seed: int, curve: dict[int, float], *, alpha: float | None = None, finished: bool = True,
        extend_at: list[int] | None = None) -> Run:
    """A job with held-out val/acc at the given steps; its summary's val/acc is the last one."""
    config = {"seed": seed, "algo": {"name": "cispo"},
              "extrapolation": {"type": "none" if alpha is None else "next", "alpha": alpha, "extend_at": extend_at}}
    summary = {"status": "finished", "val/acc": curve[max(curve)]} if finished else {}
    return Run(Path(f"s{seed}"), f"s{seed}", config, [], {}, summary,
               [{"step": s, "val/acc": v} for s, v in sorted(curve.items())])


def row(md: list[str], first: str) -> list[str]:
    line = next(x for x in md if x.startswith(f"| {first} |"))
    return [c.strip() for c in line.strip("|").split("|")]


@pytest.fixture
def arms():
    # final accuracies (%): N 20 / 30 / 40, 1.6N 50 / 50 / 60, NExt at N 40 / 45 / 50
    return {
        "none_n": [run(s, {0: 0.1, 50: a}) for s, a in zip((0, 1, 2), (0.2, 0.3, 0.4))],
        "none_long": [run(0, {0: 0.1, 40: 0.5, 80: 0.5}), run(1, {0: 0.1, 60: 0.5, 80: 0.5}),
                      run(2, {0: 0.1, 40: 0.4, 80: 0.6})],
        "next": [run(0, {0: 0.1, 30: 0.5, 50: 0.4}, alpha=1.5), run(1, {0: 0.1, 30: 0.4, 50: 0.45}, alpha=1.5),
                 run(2, {0: 0.1, 50: 0.5}, alpha=1.5)],
    }


def test_paired_differences_and_verdicts_by_hand(arms):
    md = paired_tables(arms, {})
    # NExt - 1.6N: 40-50, 45-50, 50-60 = -10, -5, -10: mean -8.33, sd 2.887, t(0.975, 2) = 4.303,
    # half = 4.303 * 2.887 / sqrt(3) = 7.17 -> [-15.5, -1.2]: below 0
    assert row(md, "NExt at N >= plain RL at 1.6N (the paper's claim)")[2:] == [
        "-8.3 [-15.5, -1.2] (n=3)", "does not hold (interval below 0)"]
    # NExt - N: +20, +15, +10: mean 15, sd 5, half = 4.303 * 5 / sqrt(3) = 12.42 -> [+2.6, +27.4]
    assert row(md, "NExt at N > plain RL at N (the jump helps at equal steps)")[2:] == [
        "+15.0 [+2.6, +27.4] (n=3)", "holds (interval above 0)"]
    # 1.6N - N: +30, +20, +20: mean 23.33, sd 5.774, half 14.34 -> [+9.0, +37.7]
    assert row(md, "the extra 0.6N steps help plain RL (else the claim is empty)")[2:] == [
        "+23.3 [+9.0, +37.7] (n=3)", "holds (interval above 0)"]


def test_steps_saved_counts_only_seeds_that_reach_the_long_runs_final(arms):
    # targets: 0.5 (seed 0, reached by 1.6N at 40), 0.5 (seed 1, at 60), 0.6 (seed 2, at 80)
    # NExt: seed 0 reaches 0.5 at 30 -> 1 - 30/40 = 25%; seed 1 never reaches 0.5; seed 2 never reaches 0.6
    assert step_savings(arms, "next") == ([25.0], 3)
    assert row(paired_tables(arms, {}), "next")[1] == (
        "1 of 3 seeds reach it (25.0): no interval (a seed that never reaches it has no saving to average)")
    # every seed reaching: seed 1 at 30 of 60 (50%), seed 2 at 40 of 80 (50%), seed 0 25%: mean 41.67,
    # sd 14.43, half = 4.303 * 14.43 / sqrt(3) = 35.85 -> [5.8, 77.5]
    arms["next"][1] = run(1, {0: 0.1, 30: 0.5, 50: 0.5}, alpha=1.5)
    arms["next"][2] = run(2, {0: 0.1, 40: 0.6, 50: 0.6}, alpha=1.5)
    assert step_savings(arms, "next") == ([25.0, 50.0, 50.0], 3)
    assert row(paired_tables(arms, {}), "next")[1] == "41.7 [5.8, 77.5] (n=3)"


def test_plain_rl_at_n_is_the_steps_saved_control(arms):
    # plain RL at N ends at 0.2 / 0.3 / 0.4, below every seed's target (0.5 / 0.5 / 0.6): no seed reaches it
    md = paired_tables(arms, {})
    assert row(md, "none_n (control: no extrapolation)")[1].startswith("0 of 3 seeds reach it")
    # a plain run at N that reaches 0.5 at step 20 in seed 0 "saves" 1 - 20/40 = 50% without extrapolating
    arms["none_n"][0] = run(0, {0: 0.1, 20: 0.5, 50: 0.5})
    assert row(paired_tables(arms, {}), "none_n (control: no extrapolation)")[1] == (
        "1 of 3 seeds reach it (50.0): no interval (a seed that never reaches it has no saving to average)")


def test_an_unfinished_run_is_left_out_of_the_pairs(arms):
    arms["next"][2] = run(2, {0: 0.1, 30: 0.5}, alpha=1.5, finished=False)
    # NExt - 1.6N over seeds 0 and 1 only: -10, -5
    assert row(paired_tables(arms, {}), "NExt at N >= plain RL at 1.6N (the paper's claim)")[2].endswith("(n=2)")


def test_the_sweep_tables_name_plain_rl_by_its_algorithm_and_nexts_by_alpha(arms):
    arms["next_alpha0.5"] = [run(s, {0: 0.1, 50: 0.3}, alpha=0.5) for s in (0, 1, 2)]
    md = next_per_seed_tables(arms, [j for js in arms.values() for j in js])
    text = "\n".join(md)
    assert "CISPO-LoRA, 1.6N steps" in text and "GRPO-LoRA" not in text
    saved = md[md.index("| method | steps saved (%) |"):]  # the steps-saved table (the first table has the arm too)
    assert row(saved, "NExt predict-extend, alpha 0.5")[1].startswith("0 of 3 seeds reach it")
    assert any(x.startswith("| NExt at N >= plain RL at 1.6N (the paper's claim) | NExt predict-extend, alpha 1.5 - "
                            "CISPO-LoRA, 1.6N steps |") for x in md)


def test_the_jumps_own_effect_is_the_difference_at_the_jump_step_by_hand():
    arms = {
        "none_n": [run(0, {0: .05, 10: .2, 20: .3, 30: .31, 50: .35}),
                   run(1, {0: .05, 10: .1, 20: .2, 30: .3, 50: .4})],
        # seed 2 has no run at N: plain RL at 1.6N is the same run up to N (continued from N's checkpoint)
        "none_long": [run(2, {0: .05, 10: .1, 20: .2, 30: .25, 80: .4})],
        "next": [run(0, {0: .05, 10: .2, 20: .3, 30: .23, 50: .34}, alpha=1.5, extend_at=[30]),
                 run(1, {0: .05, 10: .1, 20: .25, 30: .2, 50: .3}, alpha=1.5, extend_at=[30]),  # differs at 20
                 run(2, {0: .05, 10: .1, 20: .2, 30: .31, 50: .4}, alpha=1.5, extend_at=[30])],
    }
    # at step 30: 23-31 = -8, 20-30 = -10, 31-25 = +6 points; seed 1's evaluation at 20 differs from plain RL's
    effects = jump_effects(arms, "next")
    assert [(seed, same) for seed, same, _ in effects] == [(0, True), (1, False), (2, True)]
    assert [round(d, 6) for _, _, d in effects] == [-8.0, -10.0, 6.0]
    # mean -4, sd sqrt((16 + 36 + 100) / 2) = 8.718, half = 4.303 * 8.718 / sqrt(3) = 21.66 -> [-25.7, +17.7]
    assert row(jump_effect_table(arms, {}), "next") == [
        "next", "30", "2 of 3", "0: -8.0, 1: -10.0, 2: +6.0", "-4.0 [-25.7, +17.7] (n=3)"]


def test_a_run_without_a_jump_step_evaluation_has_no_jump_effect(arms):
    # the fixture's runs evaluate at 0 and N only (plain RL has no step-30 evaluation): no row, no table
    for j in arms["next"]:
        j.config["extrapolation"]["extend_at"] = [30]
    assert jump_effects(arms, "next") == [] and jump_effect_table(arms, {}) == []
