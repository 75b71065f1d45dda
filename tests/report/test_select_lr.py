"""The training-side lr choice of sweeps/smollm2_qerl_tuned.yaml (rlx.report.select_lr) and that sweep's report
layout, on hand-made run directories with known metrics.jsonl."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from rlx import report as R
from rlx.report.select_lr import main as select_main
from rlx.report.lr_choice import select
from rlx.report.qerl import infer_qerl
from rlx.run.records import read_sweep

ARM_FORMAT = {"lora_none": ("none", "none"), "lora_nvfp4": ("nvfp4", "none"), "lora_nvfp4_aqn": ("nvfp4", "aqn"),
              "lora_nf4": ("nf4", "none")}


def make_run(root: Path, arm: str, lr: str, seed: int, rewards: list[float], acc: float, status: str = "finished",
             extra: dict | None = None) -> Path:
    """A job of the sweep as `python -m rlx.train -m` leaves it: RUN/<arm file>_seed<seed>, with a reward per RL step."""
    fmt, noise = ARM_FORMAT[arm]
    job = root / f"{arm}_lr{lr}_seed{seed}"
    (job / ".hydra").mkdir(parents=True)
    cfg = {"seed": seed, "algo": {"lr": float(lr)}, "quant": {"format": fmt}, "noise": {"type": noise},
           "train": {"steps": len(rewards)}, "logger": {"group": "smollm2_qerl_tuned"}, "task": {"n_eval": 100}}
    (job / ".hydra/config.yaml").write_text(yaml.safe_dump(cfg))
    (job / ".hydra/overrides.yaml").write_text(yaml.safe_dump([f"qerl_tuned_arm={arm}_lr{lr}", f"seed={seed}"]))
    rows = [{"step": 0, "val/acc": 0.1}]
    rows += [{"step": s, "train/reward/mean": r, **(extra or {})} for s, r in enumerate(rewards, start=1)]
    rows[-1]["val/acc"] = acc
    (job / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if status:
        (job / "summary.json").write_text(json.dumps({"status": status, "val/acc": acc, "val/acc_base": 0.1,
                                                      "wall_s": 1.0}))
    return job


def late(early: float, last: list[float] | float, steps: int = 100) -> list[float]:
    """`early` for steps 1..steps-20, then the 20 values of `last` (or `last` 20 times)."""
    tail = last if isinstance(last, list) else [last] * 20
    return [early] * (steps - 20) + tail


def stage1(root: Path, nf4_complete: bool = True) -> None:
    # 16-bit: last-20 means 0.30 / 0.50 / 0.40 -> 3e-4; the held-out accuracy would have picked 1.5e-4 (0.60)
    make_run(root, "lora_none", "1.5e-4", 0, late(0.2, 0.30), acc=0.60)
    make_run(root, "lora_none", "3e-4", 0, late(0.2, 0.50), acc=0.40)
    make_run(root, "lora_none", "6e-4", 0, late(0.2, 0.40), acc=0.50)
    # NVFP4: 3e-4 alternates 0.25 / 0.75 over the last 20 (mean 0.5); 6e-4 has the higher mean over all 100
    # steps ((80 * 0.9 + 20 * 0.45) / 100 = 0.81) but 0.45 at the end -> 3e-4
    make_run(root, "lora_nvfp4", "3e-4", 0, late(0.1, [0.25, 0.75] * 10), acc=0.20)
    make_run(root, "lora_nvfp4", "6e-4", 0, late(0.9, 0.45), acc=0.30)
    make_run(root, "lora_nvfp4", "1.2e-3", 0, late(0.1, 0.20), acc=0.35)
    # AQN: 3e-4 and 6e-4 tie at 0.40 -> the smaller lr
    make_run(root, "lora_nvfp4_aqn", "3e-4", 0, late(0.1, 0.40), acc=0.10)
    make_run(root, "lora_nvfp4_aqn", "6e-4", 0, late(0.3, 0.40), acc=0.50)
    make_run(root, "lora_nvfp4_aqn", "1.2e-3", 0, late(0.1, 0.10), acc=0.50)
    # NF4: 6e-4 leads (0.35); 1.2e-3 either finished (0.30) or killed after 15 steps (no summary.json)
    make_run(root, "lora_nf4", "3e-4", 0, late(0.1, 0.25), acc=0.40)
    make_run(root, "lora_nf4", "6e-4", 0, late(0.1, 0.35), acc=0.10)
    if nf4_complete:
        make_run(root, "lora_nf4", "1.2e-3", 0, late(0.1, 0.30), acc=0.90)
    else:
        make_run(root, "lora_nf4", "1.2e-3", 0, [0.1] * 15, acc=0.90, status="")


def test_each_arm_gets_the_lr_with_the_best_last_20_step_training_reward(tmp_path):
    stage1(tmp_path)
    choices = select(read_sweep(tmp_path, marker=".hydra/config.yaml"), infer_qerl, arm_key="qerl_tuned_arm")
    assert {a: c.lr for a, c in choices.items()} == {"lora_none": 3e-4, "lora_nvfp4": 3e-4, "lora_nvfp4_aqn": 3e-4,
                                                     "lora_nf4": 6e-4}
    assert [s.score for s in choices["lora_none"].lrs] == pytest.approx([0.30, 0.50, 0.40])
    assert choices["lora_nvfp4"].lrs[0].score == pytest.approx(0.5)
    assert "tied: the smaller lr" in choices["lora_nvfp4_aqn"].why
    assert choices["lora_nf4"].why.startswith("lr 0.0006: mean train/reward/mean over the last 20 steps 0.3500, "
                                              "against 0.2500 at 0.0003, 0.3000 at 0.0012")
    assert choices["lora_nvfp4"].arm_choice == "lora_nvfp4_lr3e-4"


def test_an_arm_with_a_run_missing_is_undecided_and_the_command_says_so(tmp_path, capsys):
    stage1(tmp_path, nf4_complete=False)
    assert select_main([str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "- NF4 LoRA (QLoRA): undecided: lr 0.0012: seed 0: incomplete" in out
    assert "1 arm(s) undecided: lora_nf4" in out and "Stage 2" not in out
    # the others are decided all the same, with their numbers
    assert "| 16-bit LoRA | 0.0003 | 0: 0.5000 | 0.5000 |  | **chosen** |" in out


def test_the_command_prints_the_stage_2_sweep_with_each_arms_file(tmp_path, capsys):
    root = tmp_path / "stage1"
    stage1(root)
    assert select_main([str(root)]) == 0
    out = capsys.readouterr().out
    cmd = next(ln.strip() for ln in out.splitlines() if ln.strip().startswith("python -m rlx.sweeps"))
    assert f"hydra.sweep.dir={tmp_path / 'stage2'}" in cmd and "seed=1,2,3" in cmd
    arms = cmd.split("qerl_tuned_arm=")[1].split(",")
    assert sorted(arms) == sorted(["lora_none_lr3e-4", "lora_nvfp4_lr3e-4", "lora_nvfp4_aqn_lr3e-4", "lora_nf4_lr6e-4"])


def test_held_out_metrics_are_refused_as_the_choice(tmp_path, capsys):
    stage1(tmp_path)
    with pytest.raises(SystemExit) as e:
        select_main([str(tmp_path), "--metric", "val/acc"])
    assert e.value.code == 2 and "never on held-out metrics" in capsys.readouterr().err


def test_an_lr_of_the_grid_that_was_never_launched_leaves_its_arm_undecided(tmp_path, capsys):
    stage1(tmp_path)
    import shutil

    shutil.rmtree(tmp_path / "lora_nf4_lr3e-4_seed0")  # e.g. the other lane has not reached it yet
    assert select_main([str(tmp_path)]) == 1
    assert "- NF4 LoRA (QLoRA): undecided: lr 0.0003: not run" in capsys.readouterr().out


def test_a_failed_or_diverged_lr_is_the_worst_and_ties_and_edges_are_said(tmp_path):
    stage1(tmp_path)
    import shutil

    # NF4 at 1.2e-3 failed, at 6e-4 diverged (NaN reward at the end): 3e-4 (0.25) is chosen over both
    shutil.rmtree(tmp_path / "lora_nf4_lr1.2e-3_seed0")
    make_run(tmp_path, "lora_nf4", "1.2e-3", 0, late(0.1, 0.30), acc=0.9, status="failed")
    shutil.rmtree(tmp_path / "lora_nf4_lr6e-4_seed0")
    make_run(tmp_path, "lora_nf4", "6e-4", 0, late(0.1, float("nan")), acc=0.9)
    # NVFP4 LoRA: every lr at 0 reward
    for lr in ("3e-4", "6e-4", "1.2e-3"):
        shutil.rmtree(tmp_path / f"lora_nvfp4_lr{lr}_seed0")
        make_run(tmp_path, "lora_nvfp4", lr, 0, late(0.0, 0.0), acc=0.0)
    choices = select(read_sweep(tmp_path, marker=".hydra/config.yaml"), infer_qerl, arm_key="qerl_tuned_arm")
    nf4 = choices["lora_nf4"]
    assert nf4.lr == 3e-4 and "lr 0.0012 seed 0: failed" in nf4.why and "lr 0.0006 seed 0: train/reward/mean not " \
        "finite (diverged), scored as the worst" in nf4.why and "at the edge of the grid" in nf4.why
    assert choices["lora_nvfp4"].lr == 3e-4 and ("every lr scored 0.0000: the smaller lr by the tie rule, which the "
                                                 "data do not support over the others (no training reward at any lr)"
                                                 ) in choices["lora_nvfp4"].why
    assert "at the edge of the grid" not in choices["lora_none"].why  # 3e-4, the middle of 1.5e-4 / 3e-4 / 6e-4


def test_a_chosen_lr_whose_training_tripwires_fired_says_so_and_stays_chosen(tmp_path):
    stage1(tmp_path)
    import shutil

    # NVFP4 at 3e-4 wins on reward (0.5) while its completions agree across prompts far beyond their golds
    # (a constant answer): guess 0.9 against a gold agreement of 0.05 at every step, an excess of 85%
    shutil.rmtree(tmp_path / "lora_nvfp4_lr3e-4_seed0")
    make_run(tmp_path, "lora_nvfp4", "3e-4", 0, late(0.1, [0.25, 0.75] * 10), acc=0.20,
             extra={"train/hack/guess": 0.9, "train/hack/guess_base": 0.05})
    choices = select(read_sweep(tmp_path, marker=".hydra/config.yaml"), infer_qerl, arm_key="qerl_tuned_arm")
    assert choices["lora_nvfp4"].lr == 3e-4  # the rule is the rule
    assert "; but its training tripwires fired (seed 0: hack/guess - base 85% > 20%)" in choices["lora_nvfp4"].why
    # the other tripwires were not logged by this run: said, as for a run from before the tripwires
    assert "did not log every tripwire (seed 0: hack/unstated, hack/hedged, hack/prompt_copy: " in choices[
        "lora_nvfp4"].why
    assert "did not log every tripwire (seed 0: hack/unstated, hack/hedged, hack/prompt_copy, hack/guess: " in \
        choices["lora_none"].why and "fired" not in choices["lora_none"].why


def test_a_directory_with_both_stages_counts_stage_2_at_stage_1s_choice(tmp_path):
    # stage 1 chooses 3e-4 for 16-bit; stage 2's seeds at 3e-4 have a LOWER training reward than stage 1's
    # other lrs: pooling them into the choice would flip it to 6e-4, and seed 0 must not be counted
    stage1(tmp_path / "stage1")
    for seed, acc in zip((1, 2, 3), (0.31, 0.33, 0.35)):
        make_run(tmp_path / "stage2", "lora_none", "3e-4", seed, late(0.1, 0.1), acc=acc)
    md, _ = R.build_report(tmp_path, plots=False)
    assert "| 16-bit LoRA | 0.0003 | 0: 0.5000 | 0.5000 |  | **chosen** |" in md
    assert "The tables below count each arm's stage-2 seeds at its chosen lr" in md
    ours = dict(zip(_row(md, "model"), _row(md, "rlx SmolLM2-135M (each arm at its lr)")))
    assert ours["16-bit LoRA"].startswith("33.0 ") and ours["16-bit LoRA"].endswith("(n=3)")
    assert ours["NVFP4 LoRA"] == "20.0 (n=1)"  # no stage-2 run yet: its stage-1 run at the chosen lr


def test_two_finished_runs_of_one_seed_in_one_arm_are_refused(tmp_path):
    for sub in ("a", "b"):
        for arm in ("lora_none", "lora_nvfp4"):
            make_run(tmp_path / sub, arm, "6e-4" if arm == "lora_nvfp4" else "3e-4", 1, late(0.1, 0.2, steps=40),
                     acc=0.3)
    with pytest.raises(ValueError, match=r"arm lora_nvfp4 has two finished runs of seed 1 \(a/lora_nvfp4_lr6e-4_seed1, "
                                         r"b/lora_nvfp4_lr6e-4_seed1\): a paired comparison needs one per seed"):
        R.build_report(tmp_path, plots=False)


def _row(md: str, first: str) -> list[str]:
    line = next(ln for ln in md.splitlines() if ln.startswith(f"| {first} |"))
    return [c.strip() for c in line.strip("|").split("|")]


def test_stage_1_report_uses_each_arms_chosen_lr(tmp_path):
    stage1(tmp_path)
    md, _ = R.build_report(tmp_path, plots=False)
    assert md.startswith("# QeRL on SmolLM2-135M, each arm at its own lr")
    assert "The tables below count each arm's stage-1 run (seed 0) at its chosen lr" in md and "(4 of 12 runs)" in md
    ours = dict(zip(_row(md, "model"), _row(md, "rlx SmolLM2-135M (each arm at its lr)")))
    # the chosen runs' accuracies, not the better held-out accuracies at the other lrs
    assert ours["16-bit LoRA"] == "40.0 (n=1)" and ours["NVFP4 LoRA"] == "20.0 (n=1)"
    assert ours["NVFP4 LoRA + AQN"] == "10.0 (n=1)" and ours["NF4 LoRA (QLoRA)"] == "10.0 (n=1)"


def test_stage_2_report_gives_each_claims_verdict_and_why_the_arms_differ(tmp_path):
    # seeds 1-3 at one lr per arm. Final accuracy (%): 16-bit 30/32/34, NVFP4 40/44/48, AQN 30/32/34, NF4 20/22/40
    accs = {"lora_none": [30, 32, 34], "lora_nvfp4": [40, 44, 48], "lora_nvfp4_aqn": [30, 32, 34],
            "lora_nf4": [20, 22, 40]}
    entropy = {"lora_nvfp4": [1.0, 1.0, 1.0], "lora_nvfp4_aqn": [1.1, 0.9, 1.05]}
    for arm, lr in (("lora_none", "3e-4"), ("lora_nvfp4", "6e-4"), ("lora_nvfp4_aqn", "6e-4"), ("lora_nf4", "6e-4")):
        for i, seed in enumerate((1, 2, 3)):
            extra = {"actor/entropy": entropy.get(arm, [0.5] * 3)[i], "train/frac_reward_zero_std": 0.5,
                     "response_length/clip_ratio": 0.25 if arm == "lora_nf4" else 0.0, "rollout_corr/kl": 1e-6}
            make_run(tmp_path, arm, lr, seed, late(0.1, 0.2, steps=40), acc=accs[arm][i] / 100, extra=extra)
    md, _ = R.build_report(tmp_path, plots=False)
    assert ("Each arm ran at one lr (chosen on stage 1's training reward: `python -m rlx.report.select_lr <stage 1 "
            "directory>`): 16-bit LoRA 0.0003, NVFP4 LoRA 0.0006, NVFP4 LoRA + AQN 0.0006, NF4 LoRA (QLoRA) "
            "0.0006.") in md
    claims = {r[0]: r for r in (_row(md, c) for c in (
        "NVFP4 LoRA >= 16-bit LoRA (final accuracy)", "AQN raises policy entropy (mean over RL steps)",
        "AQN raises accuracy (final)", "NVFP4 LoRA beats QLoRA (final accuracy)"))}
    # NVFP4 - 16-bit: +10, +12, +14 -> mean 12, sd 2, t(0.975, 2) = 4.303: 12 +- 4.303 * 2 / sqrt(3) = [7.0, 17.0]
    assert claims["NVFP4 LoRA >= 16-bit LoRA (final accuracy)"][2:4] == ["+12.0 [+7.0, +17.0] (n=3)",
                                                                        "holds (interval above 0)"]
    # AQN - NVFP4 entropy: +0.1, -0.1, +0.05 -> spans 0
    assert claims["AQN raises policy entropy (mean over RL steps)"][3] == "not resolved (interval spans 0)"
    # AQN - NVFP4 accuracy: -10, -12, -14 -> [-17.0, -7.0]
    assert claims["AQN raises accuracy (final)"][2:4] == ["-12.0 [-17.0, -7.0] (n=3)", "does not hold (interval below 0)"]
    # NVFP4 - NF4: +20, +22, +8 -> mean 16.7, sd 7.57: [-2.1, +35.5]
    assert claims["NVFP4 LoRA beats QLoRA (final accuracy)"][2:4] == ["+16.7 [-2.1, +35.5] (n=3)",
                                                                     "not resolved (interval spans 0)"]
    why_line = next(ln for ln in md.split("### Why the arms differ")[1].splitlines() if ln.startswith("| NF4 LoRA"))
    cells = [c.strip() for c in why_line.strip("|").split("|")]
    # the NF4 arm's runs: half the groups zero-variance, a quarter truncated, KL 1e-6 at every step
    assert cells[1] == "50.0 ± 0.0 (n=3)" and cells[3] == "25.0 ± 0.0 (n=3)" and cells[5] == "0.000001 ± 0.000000 (n=3)"


def write_eval(job: Path, step: int, answers: list[str], golds: list[str]) -> None:
    """RUN/eval/step_N/completions.jsonl as training's evaluations write it (greedy rows, lm-eval's readings)."""
    d = job / "eval" / f"step_{step}"
    d.mkdir(parents=True)
    rows = [{"set": "default", "index": i, "kind": "greedy", "sample": 0, "prompt": f"problem {i}",
             "completion": f"The answer is {a}", "passed": a == g, "answer": a, "gold": g,
             "readings": {"flexible-extract": {"answer": a, "passed": a == g}}} for i, (a, g) in enumerate(zip(answers, golds))]
    (d / "completions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_an_accuracy_gain_made_of_one_repeated_answer_is_shown_beside_the_claim(tmp_path):
    # 20 held-out problems: gold 1 five times, then 2..16. AQN answers 1 to all 20 (5 passes, 25%); NVFP4 solves
    # 2, 2, 3 of the 15 others by seed (10%, 10%, 15%) and answers 0 elsewhere
    golds = ["1"] * 5 + [str(g) for g in range(2, 17)]
    for seed, solved in zip((1, 2, 3), (2, 2, 3)):
        job = make_run(tmp_path, "lora_nvfp4_aqn", "6e-4", seed, late(0.1, 0.2, steps=40), acc=0.25)
        write_eval(job, 40, ["1"] * 20, golds)
        job = make_run(tmp_path, "lora_nvfp4", "6e-4", seed, late(0.1, 0.2, steps=40), acc=solved / 20)
        write_eval(job, 40, ["0"] * 5 + golds[5:5 + solved] + ["0"] * (15 - solved), golds)
    md, _ = R.build_report(tmp_path, plots=False)
    row = _row(md, "AQN raises accuracy (final)")
    # accuracy: +15, +15, +10 points -> mean 13.33, sd 2.887, 4.303 * 2.887 / sqrt(3) = 7.17 -> [+6.2, +20.5]
    assert row[2:4] == ["+13.3 [+6.2, +20.5] (n=3)", "holds (interval above 0)"]
    # without gold 1: AQN 0 of 15; NVFP4 2, 2, 3 of 15 -> -13.33, -13.33, -20 -> mean -15.56, sd 3.849,
    # 4.303 * 3.849 / sqrt(3) = 9.56 -> [-25.1, -6.0]
    assert row[4:6] == ["-15.6 [-25.1, -6.0] (n=3)", "does not hold (interval below 0)"]
    jobs = md.split("## Jobs")[1]
    aqn = next(ln for ln in jobs.splitlines() if ln.startswith("| lora_nvfp4_aqn_lr6e-4_seed1 "))
    assert "step 40: **1 x 20 (gold of 5), 5 of 5 passes** | 0.0 (gold 1 out) |" in aqn
    nvfp4 = next(ln for ln in jobs.splitlines() if ln.startswith("| lora_nvfp4_lr6e-4_seed3 "))
    # NVFP4 seed 3 answers 0 to 17 problems (gold of none): marked, though none of its passes is 0
    assert "step 40: **0 x 17 (gold of 0), 0 of 3 passes** | 20.0 (gold 1 out) |" in nvfp4
