"""rlx.eval.paired: a run's gain over the base on the same problems, with the paired interval."""

import json

import pytest

from rlx.eval.paired import greedy_passed, main, paired_gain


def _write(path, passed, extra_sampled=True):
    rows = [{"set": "default", "index": i, "kind": "greedy", "sample": 0, "passed": p} for i, p in enumerate(passed)]
    if extra_sampled:  # sampled rows are not the greedy score
        rows += [{"set": "default", "index": i, "kind": "sampled", "sample": 0, "passed": True} for i in range(len(passed))]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_paired_gain_matches_the_hand_computed_interval(tmp_path):
    # base passes problems 0, 1; the run passes 1, 2, 3: d = [-1, 0, +1, +1], mean 0.25,
    # sd = sqrt(((-1.25)^2 + 0.25^2 + 0.75^2 + 0.75^2) / 3) = sqrt(2.75 / 3) = 0.95743,
    # half = 1.96 * 0.95743 / 2 = 0.93828 -> 25.0 [-68.8, +118.8] points
    base = greedy_passed(_write(tmp_path / "b.jsonl", [True, True, False, False]))
    run = greedy_passed(_write(tmp_path / "r.jsonl", [False, True, True, True]))
    g = paired_gain(base, run)
    assert (g["n"], g["base_acc"], g["run_acc"], g["gained"], g["lost"]) == (4, 50.0, 75.0, 2, 1)
    assert g["gain"] == pytest.approx(25.0)
    assert (g["low"], g["high"]) == (pytest.approx(25.0 - 93.828, abs=1e-3), pytest.approx(25.0 + 93.828, abs=1e-3))


def test_files_of_different_problems_are_refused(tmp_path):
    base = greedy_passed(_write(tmp_path / "b.jsonl", [True, False, True]))
    run = greedy_passed(_write(tmp_path / "r.jsonl", [True, False]))
    with pytest.raises(ValueError, match="different problems"):
        paired_gain(base, run)


def test_the_cli_prints_one_row_per_run(tmp_path, capsys):
    b = _write(tmp_path / "b.jsonl", [False] * 10)
    r = _write(tmp_path / "r.jsonl", [True] * 5 + [False] * 5)
    main([str(b), str(r)])
    row = capsys.readouterr().out.strip().splitlines()[-1]
    # d = five 1s, five 0s: mean 0.5, sd = sqrt(10 * 0.25 / 9) = 0.52705, half = 1.96 * 0.52705 / sqrt(10) = 0.32667
    assert "| 10 | 0.0 | 50.0 | +50.0 [+17.3, +82.7] | 5 / 0 |" in row
