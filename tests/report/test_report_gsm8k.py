"""rlx.report --layout smollm2_gsm8k on hand-made run directories (one per seed): the three readings, the paired
per-problem intervals, the t-interval over seeds, --base and its refusal, and the predictability fits."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from rlx.report import main
from rlx.report.build import build
from rlx.report.predict import TRAIN_REWARD, predictability
from rlx.report.runs import title
from rlx.run.records import read_run

TITLE = "SmolLM2-135M on {task}{env} ({start})"  # conf/experiment/smollm2_gsm8k.yaml's report title

N = 10  # problems in the held-out set
# per-problem pass flags (problem i passes iff i is listed), per reading: task's (passed), strict, flexible
BASE = {"passed": {0}, "strict-match": {0}, "flexible-extract": {0, 1}}  # 10% / 10% / 20%, every seed
END = {  # the last evaluation (step 30) of each seed
    0: {"passed": {0, 2}, "strict-match": {0, 2}, "flexible-extract": {0, 1, 2, 3}},
    1: {"passed": {0}, "strict-match": {0}, "flexible-extract": {1, 2, 3, 4}},
    2: {"passed": {0, 1}, "strict-match": {0, 1}, "flexible-extract": {0, 1, 2}},
}
KEYS = {"passed": "val/acc", "strict-match": "val/strict-match", "flexible-extract": "val/flexible-extract"}
EVAL_STEPS = (0, 10, 15, 20, 25, 30)


def problems(flags: dict[str, set[int]]) -> str:
    rows = [{"set": "gsm8k", "index": i, "kind": "greedy", "sample": 0, "passed": i in flags["passed"],
             "readings": {r: {"answer": None, "passed": i in flags[r]} for r in ("strict-match", "flexible-extract")}}
            for i in range(N)]
    rows.append({"set": "gsm8k", "index": 0, "kind": "sample", "sample": 0, "passed": True, "readings": {}})
    return "".join(json.dumps(r) + "\n" for r in rows)


def accs(flags: dict[str, set[int]]) -> dict[str, float]:
    return {KEYS[r]: len(p) / N for r, p in flags.items()}


def train_reward(step: int) -> float:
    """A sigmoid in x = step - 1 (R0 = 0.1, A = 0.6, C_mid = 10, B = 2) with +-0.005 alternating noise."""
    x = step - 1
    return 0.1 + 0.5 / (1 + (10 / x) ** 2) + 0.005 * (-1) ** step if x > 0 else 0.1


def make_run(root: Path, name: str, seed: int, end: dict | None, step0_file: bool, steps=EVAL_STEPS,
             files_at=(30,)) -> Path:
    """A run directory as `python -m rlx.train experiment=smollm2_gsm8k seed=S hydra.run.dir=...` leaves it (only
    what the report reads). Between start and end the evaluations interpolate linearly (no file)."""
    run = root / name
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra/config.yaml").write_text(yaml.safe_dump({
        "seed": seed, "task": {"name": "gsm8k", "n_eval": 0, "holdout": N, "eval_path": None}, "train": {"steps": 30},
        "scaling": {"fit": "none", "compute": "flops", "bootstrap": 20, "min_points": 4}}))
    (run / "summary.json").write_text(json.dumps({"status": "finished", "wall_s": 60.0}))
    rows = []
    last = max(steps)
    for s in range(0, last + 1):
        row = {"step": s}
        if s >= 1:
            row[TRAIN_REWARD] = train_reward(s)
        if s in steps:
            a, b = accs(BASE), accs(end or BASE)
            row.update({k: a[k] + (b[k] - a[k]) * s / max(last, 1) for k in a})
            row["perf/compute/flops"] = 1e12 * s
        rows.append(row)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if step0_file:
        (run / "eval/step_0").mkdir(parents=True)
        (run / "eval/step_0/completions.jsonl").write_text(problems(BASE))
    for s in files_at:
        (run / f"eval/step_{s}").mkdir(parents=True)
        (run / f"eval/step_{s}/completions.jsonl").write_text(problems(end))
    return run


def three_seeds(root: Path) -> Path:
    """seed0 started after efb75a8 (its own eval/step_0); seed1 and seed2 before (no step-0 file); plus an OOM-killed
    attempt that logged only its step-0 evaluation."""
    make_run(root, "seed0", 0, END[0], step0_file=True)
    make_run(root, "seed1", 1, END[1], step0_file=False)
    make_run(root, "seed2", 2, END[2], step0_file=False)
    make_run(root, "seed0.oomkilled", 0, None, step0_file=False, steps=(0,), files_at=())
    return root / "seed0" / "eval" / "step_0"


def row(md: str, *first: str) -> list[str]:
    head = "| " + " | ".join(first) + " |"
    line = next(ln for ln in md.splitlines() if ln.startswith(head))
    return [c.strip() for c in line.strip("|").split("|")]


def test_per_seed_paired_intervals_and_the_t_interval_over_seeds(tmp_path):
    base = three_seeds(tmp_path)
    md, pngs, doc = build(tmp_path, "smollm2_gsm8k", plots=False, base=base)
    assert pngs == []
    assert "Not counted: `seed0.oomkilled` (no evaluation after step 0)" in md
    assert "**Start from --base.** seed1, seed2 have no per-problem file for step 0" in md
    # seed 0, flexible-extract: start {0,1} -> end {0,1,2,3}: d = 1 on problems 2, 3, else 0; mean 0.2,
    # sd = sqrt((2 * 0.8^2 + 8 * 0.2^2) / 9) = sqrt(1.6 / 9), sd / sqrt(10) = sqrt(1.6 / 90) = 0.13333,
    # half = 1.96 * 0.13333 = 0.26133 -> +20.0 [-6.1, +46.1]; gained 2, lost 0
    assert row(md, "0", "lm-eval flexible-extract") == [
        "0", "lm-eval flexible-extract", "20.0 (2/10)", "step 30: 40.0 (4/10)", "+20.0 [-6.1, +46.1] (n=10)",
        "2 / 0", "eval/step_0"]
    # seed 1, flexible-extract: {0,1} -> {1,2,3,4}: d = -1 (problem 0), +1 (2, 3, 4); mean 0.2,
    # squares about the mean 1.44 + 0.04 + 3 * 0.64 + 5 * 0.04 = 3.6, sd = sqrt(3.6 / 9) = sqrt(0.4),
    # sd / sqrt(10) = 0.2, half = 0.392 -> +20.0 [-19.2, +59.2]; gained 3, lost 1; the start from --base
    assert row(md, "1", "lm-eval flexible-extract")[2:] == [
        "20.0 (2/10)", "step 30: 40.0 (4/10)", "+20.0 [-19.2, +59.2] (n=10)", "3 / 1", "--base"]
    # seed 0, strict-match: {0} -> {0,2}: d = +1 once; mean 0.1, sd = sqrt((0.81 + 9 * 0.01) / 9) = sqrt(0.1),
    # sd / sqrt(10) = 0.1, half = 0.196 -> +10.0 [-9.6, +29.6]
    assert row(md, "0", "lm-eval strict-match")[2:6] == [
        "10.0 (1/10)", "step 30: 20.0 (2/10)", "+10.0 [-9.6, +29.6] (n=10)", "1 / 0"]
    # seed 1, strict-match: the same problem passes at both ends: every d = 0, a zero-width interval
    assert row(md, "1", "lm-eval strict-match")[4:6] == ["+0.0 [+0.0, +0.0] (n=10)", "0 / 0"]
    assert row(md, "2", "task (stated number)")[2:6] == [
        "10.0 (1/10)", "step 30: 20.0 (2/10)", "+10.0 [-9.6, +29.6] (n=10)", "1 / 0"]
    # over seeds, flexible-extract: gains 20, 20, 10 points; mean 16.667, sd = sqrt((2 * 3.333^2 + 6.667^2) / 2)
    # = sqrt(33.333) = 5.7735, se = 5.7735 / sqrt(3) = 3.3333, t(0.975, 2 dof) = 4.3027, half = 14.342
    # -> +16.7 [+2.3, +31.0]; mean start 20.0, mean end (40 + 40 + 30) / 3 = 36.7
    assert row(md, "lm-eval flexible-extract", "3") == [
        "lm-eval flexible-extract", "3", "20.0", "36.7", "+16.7 [+2.3, +31.0]", "+20.0, +20.0, +10.0"]
    # strict-match: gains 10, 0, 10: mean 6.667, the same sd and half -> [-7.7, +21.0]
    assert row(md, "lm-eval strict-match", "3")[4] == "+6.7 [-7.7, +21.0]"
    flex = doc["over_seeds"]["val/flexible-extract"]
    assert (flex["gain_mean"], flex["gain_lo"], flex["gain_hi"]) == (
        pytest.approx(50 / 3), pytest.approx(50 / 3 - 14.342, abs=1e-3), pytest.approx(50 / 3 + 14.342, abs=1e-3))
    seed1 = next(r for r in doc["runs"] if r["name"] == "seed1")
    assert seed1["start_source"] == "--base" and seed1["start_file"] == str(base / "completions.jsonl")
    g = seed1["readings"]["val/flexible-extract"]["paired"]
    assert (g["gain"], g["low"], g["high"], g["gained"], g["lost"]) == (
        pytest.approx(20.0), pytest.approx(-19.2), pytest.approx(59.2), 3, 1)


def test_without_base_the_runs_lacking_a_step0_file_say_so(tmp_path):
    three_seeds(tmp_path)
    md, _, doc = build(tmp_path, "smollm2_gsm8k", plots=False)
    cells = row(md, "1", "lm-eval flexible-extract")
    assert cells[4] == "– (no per-problem file for step 0: pass --base)"
    assert "No per-problem file for step 0 in seed1, seed2" in md
    assert cells[2:4] == ["20.0 (2/10)", "step 30: 40.0 (4/10)"] and cells[6] == "none"  # logged values stay
    assert row(md, "0", "lm-eval flexible-extract")[4] == "+20.0 [-6.1, +46.1] (n=10)"  # its own file
    # the over-seeds gains need only the logged val/*: the same as with --base
    assert row(md, "lm-eval flexible-extract", "3")[4] == "+16.7 [+2.3, +31.0]"


def test_a_run_without_per_problem_files_counts_from_its_config(tmp_path):
    # n_eval 0 (all) of a held-out slice carved out of the training file (eval_path null): task.holdout problems
    make_run(tmp_path, "seed5", 5, END[0], step0_file=False, files_at=())
    md, _, doc = build(tmp_path, "smollm2_gsm8k", plots=False)
    assert row(md, "5", "lm-eval flexible-extract")[2:5] == [
        "20.0 (2/10)", "step 30: 40.0 (4/10)", "– (no per-problem file for step 0: pass --base)"]


def test_a_base_that_is_not_the_runs_start_is_refused(tmp_path):
    three_seeds(tmp_path)
    wrong = tmp_path / "seed0" / "eval" / "step_30"  # seed 0's end: val/acc 20%, not the 10% logged at step 0
    with pytest.raises(ValueError, match=r"its passed accuracy 0.2000 \(2/10\) is not the val/acc = 0.1000 that "
                                         r"seed1 logged at step 0"):
        build(tmp_path, "smollm2_gsm8k", plots=False, base=wrong)
    with pytest.raises(ValueError, match="no completions.jsonl there"):
        build(tmp_path, "smollm2_gsm8k", plots=False, base=tmp_path / "nowhere")
    with pytest.raises(ValueError, match="--base is for a report of kind runs"):
        build(tmp_path, "smollm2_wordproblems", plots=False, base=wrong)
    with pytest.raises(SystemExit):  # the command line: a usage error naming the reason
        main([str(tmp_path), "--layout", "smollm2_gsm8k", "--no-plots", "--base", str(wrong)])


def test_too_few_points_give_a_reasoned_cell_and_the_training_reward_is_fitted(tmp_path):
    three_seeds(tmp_path)
    md, _, doc = build(tmp_path, "smollm2_gsm8k", plots=False, base=tmp_path / "seed0")  # --base RUN works too
    held = md.split("### held-out lm-eval flexible-extract")[1].split("###")[0]
    # evaluations at flops 10, 15, 20, 25, 30 (x 1e12) after step 0; the first half (<= 15e12): steps 10, 15
    cells = row(held, "0")
    assert cells[1] == "10, 15"
    assert cells[2] == ("no fit: the first half (perf/compute/flops <= 1.5e+13) holds 2 evaluation(s) after the "
                        "start (the start fixes R0), a 3-parameter sigmoid needs at least 4 (scaling.min_points 4): "
                        "more evaluations in the first half, or a longer run")
    assert cells[3:] == ["–"] * 7
    rep = next(r for r in doc["predictability"] if r["metric"] == "val/flexible-extract" and r["seed"] == 2)
    assert rep["fit"] is None and rep["heldout_steps"] == [20, 25, 30] and "needs at least 4" in rep["reason"]
    # the training reward: x = step - 1 in 1..29, first half x <= 14.5 (steps 2..15), held out steps 16..30
    train = md.split("### secondary: the training reward")[1].split("##")[0]
    assert "not a held-out reading" in md
    cells = row(train, "0")
    assert cells[1] == "2-15"
    rep = next(r for r in doc["predictability"] if r["metric"] == TRAIN_REWARD and r["seed"] == 0)
    f, last = rep["fit"], rep["heldout"][-1]
    assert f["R0"] == pytest.approx(0.1) and f["params"]["A"] == pytest.approx(0.6, abs=0.03)
    assert last["step"] == 30 and last["measured"] == pytest.approx(train_reward(30))
    assert abs(last["predicted"] - last["measured"]) < 0.03 and isinstance(last["inside"], bool)
    assert cells[6].startswith(f"step 30: {last['predicted']:.3f} [")


def test_predictability_on_enough_held_out_points(tmp_path):
    # evaluations every 2 steps to 32, accuracy a sigmoid of compute: the first half (<= 16e12) has 8 points
    run = tmp_path / "r"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra/config.yaml").write_text(yaml.safe_dump({"seed": 0, "scaling": {"bootstrap": 20}}))
    acc = lambda s: 0.05 + 0.3 / (1 + (12 / s) ** 1.5) if s else 0.05  # noqa: E731
    rows = [{"step": s, "val/flexible-extract": acc(s) + (0.002 * (-1) ** (s // 2) if s else 0.0),
             "val/acc": acc(s) / 2, "perf/compute/flops": 1e12 * s} for s in range(0, 33, 2)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    rep, (x, y, fit) = predictability(read_run(run), "val/flexible-extract")
    assert rep["fit_steps"] == list(range(2, 17, 2)) and rep["heldout_steps"] == list(range(18, 33, 2))
    assert rep["fit"]["R0"] == pytest.approx(0.05) and rep["fit"]["n_points"] == 8
    assert rep["x"] == "perf/compute/flops" and x.tolist() == [1e12 * s for s in range(2, 33, 2)]
    last = rep["heldout"][-1]
    assert last["step"] == 32 and abs(last["predicted"] - acc(32)) < 0.03
    assert rep["fit"]["heldout_mae"] == pytest.approx(np.mean([abs(h["predicted"] - h["measured"])
                                                               for h in rep["heldout"]]))
    # in the report: the row, and the fitted curves' figure
    md, pngs, _ = build(tmp_path, "smollm2_gsm8k", plots=True)
    cells = row(md.split("### held-out lm-eval flexible-extract")[1], "0")
    assert cells[1] == "2, 4, 6, 8, 10, 12, 14, 16" and cells[6].startswith(f"step 32: {last['predicted']:.3f} [")
    assert [p.name for p in pngs] == ["report_curves.png", "report_predictability.png"]


def test_the_command_writes_markdown_json_and_curves(tmp_path, capsys):
    base = three_seeds(tmp_path)
    assert main([str(tmp_path), "--layout", "smollm2_gsm8k", "--base", str(base / "completions.jsonl")]) == 0
    out = capsys.readouterr().out
    md = (tmp_path / "report.md").read_text()
    assert md in out and "# SmolLM2-135M on real GSM8K" in md and "![report_curves](report_curves.png)" in md
    doc = json.loads((tmp_path / "report.json").read_text())
    assert [r["seed"] for r in doc["runs"]] == [0, 1, 2] and doc["pngs"] == ["report_curves.png"]
    assert (tmp_path / "report_curves.png").stat().st_size > 10_000
    assert f"saved {tmp_path / 'report.md'}, {tmp_path / 'report.json'}, {tmp_path / 'report_curves.png'}" in out


def test_a_run_whose_compute_is_front_loaded_is_also_fitted_by_steps(tmp_path):
    # evaluations every 2 steps to 32 whose flops per step fall as completions shrink: cumulative flops
    # 1e12 * 32 * (1 - exp(-s / 4)), so half the largest (~16e12) is reached by step 2.8: one evaluation
    # (step 2) in the first half of the compute, no fit; by steps the first half (<= 16) holds steps 2..16
    import math

    run = tmp_path / "r"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra/config.yaml").write_text(yaml.safe_dump({"seed": 0, "scaling": {"bootstrap": 20, "compute": "flops"}}))
    acc = lambda s: 0.05 + 0.3 / (1 + (12 / s) ** 1.5) if s else 0.05  # noqa: E731
    rows = [{"step": s, "val/flexible-extract": acc(s) + (0.002 * (-1) ** (s // 2) if s else 0.0), "val/acc": acc(s) / 2,
             "perf/compute/flops": 1e12 * 32 * (1 - math.exp(-s / 4))} for s in range(0, 33, 2)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    by_flops, _ = predictability(read_run(run), "val/flexible-extract")
    assert by_flops["fit"] is None and by_flops["fit_steps"] == [2] and "holds 1 evaluation" in by_flops["reason"]
    by_steps, (x, _, _) = predictability(read_run(run), "val/flexible-extract", compute="steps")
    assert by_steps["x"] == "perf/compute/steps" and by_steps["fit_steps"] == list(range(2, 17, 2))
    assert x.tolist() == [float(s) for s in range(2, 33, 2)]
    assert abs(by_steps["heldout"][-1]["predicted"] - acc(32)) < 0.03
    md, _, doc = build(tmp_path, "smollm2_gsm8k", plots=False)
    steps_part = md.split("### the same fits with x = RL steps")[1].split("### secondary")[0]
    cells = row(steps_part.split("x = steps")[1], "0")  # the flexible-extract table comes first
    assert cells[1] == "2, 4, 6, 8, 10, 12, 14, 16" and cells[6].startswith(f"step 32: {by_steps['heldout'][-1]['predicted']:.3f} [")
    assert [r["x"] for r in doc["predictability"] if r["metric"] == "val/flexible-extract"] == [
        "perf/compute/flops", "perf/compute/steps"]


def _configured(root: Path, name: str, config: dict):
    (root / name / ".hydra").mkdir(parents=True)
    (root / name / ".hydra/config.yaml").write_text(yaml.safe_dump(config))
    return read_run(root / name)


def test_the_title_says_what_the_runs_are(tmp_path):
    # the GSM8K recipe: task=file on GSM8K's files, an SFT warm start
    gsm = {"task": {"name": "file", "train_path": "../shared/data/gsm8k/train.jsonl"}, "model": {"sft": {"data": "x"}}}
    assert title(TITLE, [_configured(tmp_path, "g", gsm)]) == "SmolLM2-135M on real GSM8K (SFT, then RL)"
    # the word problems from the pretrained model, one with the calculator environment
    wp = {"task": {"name": "wordproblems"}, "model": {"sft": {"data": None}}, "env": {"name": "none"}}
    calc = {**wp, "env": {"name": "calculator"}}
    assert title(TITLE, [_configured(tmp_path, "w", wp)]) == "SmolLM2-135M on rlx's word problems (RL from the pretrained model)"
    assert title(TITLE, [_configured(tmp_path, "c", calc)]) == ("SmolLM2-135M on rlx's word problems, env=calculator "
                                                          "(RL from the pretrained model)")
    mixed = title(TITLE, [_configured(tmp_path, "g2", gsm), _configured(tmp_path, "w2", wp)])
    assert mixed == "SmolLM2-135M on real GSM8K / rlx's word problems (some runs from an SFT warm start)"


GOLDS = ["3", "3", "7", "3.0", "1", "2", "8", "4", "5", "6"]  # "3" thrice ("3.0" is 3): the most common gold


def with_golds(path: Path, answers: list[str]) -> None:
    """Give a fixture's completions.jsonl the gold and the flexible-extract answer rlx-eval writes per row."""
    rows = [json.loads(ln) for ln in path.read_text().splitlines()]
    for r in rows:
        r["gold"] = GOLDS[r["index"]]
        r["readings"]["flexible-extract"] = {**r["readings"].get("flexible-extract", {}), "answer": answers[r["index"]]}
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_the_constant_guess_baseline_is_shown_beside_the_readings(tmp_path):
    three_seeds(tmp_path)
    md, _, doc = build(tmp_path, "smollm2_gsm8k", plots=False)
    assert "constant-guess" not in md and "constant_guess" not in doc  # files without golds: nothing to say
    # seed 0 starts answering each problem's own index and ends answering 3 everywhere; its end passes {0, 2}
    with_golds(tmp_path / "seed0/eval/step_0/completions.jsonl", [str(i) for i in range(N)])
    with_golds(tmp_path / "seed0/eval/step_30/completions.jsonl", ["3"] * N)
    md, _, doc = build(tmp_path, "smollm2_gsm8k", plots=False)
    # 3 is the gold of problems 0, 1 and 3: answering 3 everywhere passes 3 of 10 in every reading
    assert "**3** is the gold of 3 of 10 problems, so answering 3 everywhere scores **30.0%**" in md
    assert doc["constant_guess"] == {"gsm8k": {"answer": "3", "problems": 3, "n": N, "acc": 0.3}}
    section = md.split("## The constant-guess baseline")[1].split("\n## ")[0]
    # the start: answer i for problem i, so each answer once (ties: the first seen, 0, is the mode); its one pass
    # (the fixture's verdict) is problem 0, answered 0; gold 3, so none of the 7 others passes
    assert row(section, "0", "step 0") == ["0", "step 0", "0 x 1 (gold of 0), 1 of 1 passes", "0.0 (gold 3 out)"]
    # the end: 3 given to all 10 problems, the gold of 3, and both passes (problems 0 and 2) answer it: given to
    # 10 >= 2 x 3 golds and >= 15% of the problems, so suspect (bold); without gold 3: problem 2 (gold 7) of the
    # 7 others passes (the fixture's verdict), 1 / 7 = 14.3%
    assert row(section, "0", "step 30") == [
        "0", "step 30", "**3 x 10 (gold of 3), 2 of 2 passes**", "14.3 (gold 3 out)"]
    assert [(a["seed"], a["step"], a["given"], a["suspect"]) for a in doc["answers"]] == [
        (0, 0, 1, False), (0, 30, 10, True)]
