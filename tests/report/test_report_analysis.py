"""The analysis-only tables (formerly rlx/bench/aqn_entropy.py and next_steps.py) on hand-made and real sweeps."""

from __future__ import annotations

import numpy as np
import pytest

from rlx.report import build_report
from rlx.report.qerl import noise_windows
from tests.report.test_report import finished, make_job, qerl_config, table_row
from tests.report.test_report_golden import DATA


def test_noise_windows_are_the_steps_of_largest_aqn_noise_then_the_rest():
    assert noise_windows(100) == [("entropy 11-30", 11, 30), ("entropy 31-100", 31, 100), ("entropy 1-100", 1, 100)]
    assert noise_windows(5) == [("entropy 1-1", 1, 1), ("entropy 2-5", 2, 5), ("entropy 1-5", 1, 5)]


def test_aqn_windows_compare_the_same_seed_with_and_without_noise(tmp_path):
    # 10 steps: window 1 = steps 2-3, window 2 = steps 4-10; entropy = step (plain) and 2 * step (AQN)
    def rows(scale):
        return [{"step": 0, "val/acc": 0.1}] + [{"step": s, "actor/entropy": scale * s} for s in range(1, 11)]

    for num, (arm, noise, scale, acc) in enumerate([("lora_nvfp4", "none", 1.0, 0.5), ("lora_nvfp4_aqn", "aqn", 2.0, 0.6)]):
        make_job(tmp_path, num, qerl_config("nvfp4", noise, 10, 0), [f"qerl_arm={arm}", "seed=0"],
                 finished(acc, 0.1), rows(scale))
    make_job(tmp_path, 2, qerl_config("nvfp4", "aqn", 10, 1), ["qerl_arm=lora_nvfp4_aqn", "seed=1"],
             finished(0.7, 0.1), rows(3.0))  # no plain run at seed 1: no row
    md, _ = build_report(tmp_path, plots=False)
    header = table_row(md, "seed")
    assert header[1:4] == ["entropy 2-3 (none / aqn)", "entropy 4-10 (none / aqn)", "entropy 1-10 (none / aqn)"]
    # hand-computed: mean(2, 3) = 2.5; mean(4..10) = 7; mean(1..10) = 5.5; AQN doubles each
    assert table_row(md, "0") == ["0", "2.5000 / 5.0000", "7.0000 / 14.0000", "5.5000 / 11.0000", "50.0 / 60.0"]
    assert "| 1 |" not in md.split("### AQN's effect per seed")[1].split("##")[0]
    assert table_row(md, "aqn - none") == ["aqn - none", "+2.5000 (n=1)", "+7.0000 (n=1)", "+5.5000 (n=1)",
                                           "+10.0 (n=1)"]  # one paired seed: no interval


def test_paired_cell_is_the_mean_difference_with_its_t_interval():
    from rlx.report.tables import paired_cell

    # diffs 1, 2, 3: mean 2, sd 1, t(0.975, 2) = 4.3027 -> half-width 4.3027 / sqrt(3) = 2.4841
    assert paired_cell([1.0, 2.0, 3.0], "{:+.3f}") == "+2.000 [-0.484, +4.484] (n=3)"
    assert paired_cell([], "{:.1f}") == "–"


def test_steps_to_reach_per_seed_uses_each_seeds_own_long_baseline(tmp_path):
    def cfg(kind, steps, seed):
        return {"seed": seed, "train": {"steps": steps}, "logger": {"group": "next_table"},
                "extrapolation": {"type": kind, "extend_at": [30] if kind != "none" else []}}

    def evals(accs):
        return [{"step": 10 * i, "val/acc": a} for i, a in enumerate(accs)]

    runs = [("none_long", "none", 80, 0, [0.1, 0.2, 0.3, 0.5]), ("next", "next", 50, 0, [0.1, 0.5, 0.6]),
            ("none_n", "none", 50, 0, [0.1, 0.2, 0.4]),
            ("none_long", "none", 80, 1, [0.1, 0.2, 0.3]), ("next", "next", 50, 1, [0.1, 0.2, 0.3])]
    for num, (arm, kind, steps, seed, accs) in enumerate(runs):
        make_job(tmp_path, num, cfg(kind, steps, seed), [f"next_arm={arm}", f"seed={seed}"],
                 finished(accs[-1], 0.1), evals(accs))
    md, _ = build_report(tmp_path, plots=False)
    section = md.split("### Steps to reach, per seed (val/acc)")[1].split("### ")[0]
    assert table_row(section, "seed")[2:] == ["GRPO-LoRA, 1.6N steps", "GRPO-LoRA, N steps", "NExt predict-extend"]
    # seed 0: target 50% (its own 1.6N final); next reaches it at step 10, none_n never does
    assert table_row(section, "0") == ["0", "50.0", "30 (final 50.0)", "never (final 40.0)", "10 (final 60.0)"]
    # seed 1: target 30%; next reaches it at step 20; no none_n run at seed 1
    assert table_row(section, "1") == ["1", "30.0", "20 (final 30.0)", "–", "20 (final 30.0)"]


@pytest.mark.parametrize("name, title", [("qerl_table1", "### AQN's effect per seed"),
                                         ("next_table", "### Steps to reach, per seed (val/mean_at_k)")])
def test_the_analysis_tables_render_on_the_real_sweeps(name, title):
    md, _ = build_report(DATA / name, plots=False)
    section = md.split(title)[1].split("\n## ")[0]
    assert table_row(section, "0")  # one row for the one seed of the tiny sweep
    if name == "qerl_table1":
        # tests/data/sweeps/qerl_table1/2 (lora_nvfp4): actor/entropy at steps 2-5 averages to 3.5793
        assert table_row(section, "0")[2].startswith("3.5793 / ")


def test_loo_report_labels_a_tie_and_an_undetermined_asymptote(tmp_path):
    from tests.report.test_report import sigmoid

    compute = np.arange(0, 41) * 1e9
    same = sigmoid(np.maximum(compute, 1.0), 0.6, 2.0, 8e9, 0.2) + np.random.default_rng(0).normal(0, 0.005, 41)
    rising = sigmoid(np.maximum(compute, 1.0), 3.0, 1.0, 4e11, 0.2)  # far below its ceiling: A hits the grid top
    for num, (arm, reward) in enumerate([("scalerl", same), ("no_fp32_head", same.copy()), ("on_policy", rising)]):
        reward[0] = 0.2
        rows = [{"step": 5 * i, "val/mean_at_k": float(r), "perf/compute/flops": float(c)}
                for i, (c, r) in enumerate(zip(compute, reward))]
        cfg = {"seed": 0, "logger": {"group": "scalerl_loo"},
               "scaling": {"fit": "sigmoid", "metric": "val/mean_at_k", "compute": "flops", "bootstrap": 20}}
        make_job(tmp_path, num, cfg, [f"loo_arm={arm}", "seed=0"],
                 {"status": "finished", "val/mean_at_k": float(reward[-1])}, rows)
    md, _ = build_report(tmp_path, plots=False)
    tie = table_row(md, "FP32 LM head off")
    assert tie[6] == "+0.000" and tie[7].startswith("tie (B at common A=0.605: scalerl 1.92 vs no_fp32_head 1.92)")  # no winner
    edge = table_row(md, "PipelineRL-8 -> on-policy (sync)")
    assert edge[3].startswith("1.000")
    assert edge[7] == "undetermined (A of on_policy at the edge of its grid (the data do not pin the asymptote))"
    assert edge[9].endswith("(undetermined)")  # the row's note


def test_pretrained_sweep_reports_base_and_after_rl_per_seed_with_the_paired_gain(tmp_path):
    # 3 seeds of a 4-step run on 10 held-out problems; evaluations at steps 0 and 4
    def cfg(seed):
        return {"seed": seed, "train": {"steps": 4}, "task": {"n_eval": 10}, "rollout": {"engine": "vllm"},
                "logger": {"group": "smollm2_wordproblems"}}

    def rows(final, step_s, eval_s):
        out = [{"step": 0, "val/acc": 0.1, "timing_s/eval": 50.0}]
        for s in range(1, 5):
            row = {"step": s, "train/reward/mean": 0.1 * s, "timing_s/step": step_s + (eval_s if s == 4 else 0.0)}
            if s == 4:
                row.update({"val/acc": final, "timing_s/eval": eval_s})
            out.append(row)
        return out

    for seed, final in enumerate([0.2, 0.4, 0.3]):
        make_job(tmp_path, seed, cfg(seed), [f"seed={seed}"], {**finished(final, 0.1), "wall_s": 100.0 + seed},
                 rows(final, 30.0, 40.0))
    md, _ = build_report(tmp_path, plots=False)
    assert "### engine: vllm" in md
    # eval time is taken out of step 4: every RL step is 30 s -> 2 steps / min; rewards (.1+.2+.3+.4)/4 = .25
    assert table_row(md, "1") == ["1", "10.0 (1/10)", "40.0 (4/10)", "0.250 / 0.250", "30.0", "2.00", "101"]
    # gains +10, +30, +20 points: mean 20, sd 10, t(0.975, 2) 4.3027 -> half-width 24.84
    assert table_row(md, "3 runs") == ["3 runs", "10.0 (one deterministic evaluation, the same in all 3 runs)",
                                       "30.0 ± 10.0 (n=3)", "+20.0 [-4.8, +44.8] (n=3)"]


def test_tuning_sweep_reports_one_arm_per_setting(tmp_path):
    # sweeps/smollm2_tune.yaml varies algo.lr (no config group): its arms are read from each job's config
    def cfg(lr, seed, algo="grpo"):
        return {"seed": seed, "train": {"steps": 4}, "task": {"n_eval": 10}, "algo": {"lr": lr, "name": algo},
                "rollout": {"engine": "vllm", "temperature": 0.7, "prompts_per_step": 4, "group_size": 4},
                "model": {"lora": {"r": 16}}, "logger": {"group": "smollm2_tune"}}

    rows = [{"step": 0, "val/acc": 0.1}, {"step": 4, "val/acc": 0.3, "train/reward/mean": 0.2}]
    for num, (lr, seed) in enumerate([(1e-4, 0), (3e-4, 0), (3e-4, 1)]):
        make_job(tmp_path, num, cfg(lr, seed), [f"algo.lr={lr}", f"seed={seed}"], finished(0.3, 0.1), rows)
    make_job(tmp_path, 3, cfg(3e-4, 0, "cispo"), ["algo=cispo", "seed=0"], finished(0.3, 0.1), rows)
    md, _ = build_report(tmp_path, plots=False)
    assert md.startswith("# Tuning SmolLM2-135M GRPO on word problems")
    assert "### grpo, lr 0.0001, temperature 0.7, 4 prompts x 4, LoRA r 16, 4 steps" in md
    assert "### grpo, lr 0.0003, temperature 0.7, 4 prompts x 4, LoRA r 16, 4 steps" in md
    assert "### cispo, lr 0.0003, temperature 0.7, 4 prompts x 4, LoRA r 16, 4 steps" in md  # its own arm
    assert table_row(md, "2 runs")[-1] == "+20.0 [+20.0, +20.0] (n=2)"  # both seeds gain 30 - 10 points


def test_smollm2_qerl_sweep_reports_table1_pairs_and_each_arms_seeds(tmp_path):
    # 2 seeds x 3 arms (sweeps/smollm2_qerl.yaml), 4 RL steps on 10 held-out problems, evaluations at 0 and 4
    arms = {"lora_none": ("none", "none"), "lora_nvfp4": ("nvfp4", "none"), "lora_nvfp4_aqn": ("nvfp4", "aqn")}
    base = {"none": 0.2, "nvfp4": 0.1}  # the step-0 evaluation of each base format
    final = {("lora_none", 0): 0.5, ("lora_nvfp4", 0): 0.4, ("lora_nvfp4_aqn", 0): 0.6,
             ("lora_none", 1): 0.7, ("lora_nvfp4", 1): 0.3, ("lora_nvfp4_aqn", 1): 0.3}
    entropy = {"lora_none": 1.0, "lora_nvfp4": 1.5, "lora_nvfp4_aqn": 2.0}
    num = 0
    for seed in (0, 1):
        for arm, (fmt, noise) in arms.items():
            cfg = {**qerl_config(fmt, noise, 4, seed), "logger": {"group": "smollm2_qerl"}, "task": {"n_eval": 10}}
            rows = [{"step": 0, "val/acc": base[fmt]}] + [
                {"step": s, "train/reward/mean": 0.1 * s, "actor/entropy": entropy[arm] + 0.1 * seed} for s in (1, 2, 3)]
            rows.append({"step": 4, "train/reward/mean": 0.4, "actor/entropy": entropy[arm] + 0.1 * seed,
                         "val/acc": final[arm, seed]})
            make_job(tmp_path, num, cfg, [f"qerl_arm={arm}", f"seed={seed}"], finished(final[arm, seed], base[fmt]),
                     rows)
            num += 1
    md, _ = build_report(tmp_path, plots=False)
    assert md.startswith("# QeRL on SmolLM2-135M (word problems, fp32, vLLM)")
    # Table 1: the sweep's arms and their bases only (no NF4 / MXFP4 / full-FT columns), the paper's rows beside
    assert table_row(md, "model") == ["model", "16-bit base", "NVFP4 base", "16-bit LoRA", "NVFP4 LoRA",
                                      "NVFP4 LoRA + AQN"]
    ours = table_row(md, "rlx SmolLM2-135M (this sweep)")
    assert ours[1].startswith("20.0 (one deterministic") and ours[2].endswith("†")
    assert ours[3] == "60.0 ± 14.1 (n=2)"  # (50 + 70) / 2; sd of 50, 70 = 14.14
    assert table_row(md, "Qwen2.5-7B (paper)")[1:] == ["76.3", "73.4", "88.1", "88.5", "90.8"]
    # NVFP4 - 16-bit, seed by seed: final 40-50 = -10, 30-70 = -40 -> mean -25, sd 21.21, t(.975, 1) 12.706
    # -> half-width 12.706 * 21.21 / sqrt 2 = 190.6; gains (40-10)-(50-20) = 0 and (30-10)-(70-20) = -30;
    # entropy 1.5 - 1.0 at both seeds = +0.5 exactly
    pair = table_row(md, "NVFP4 LoRA - 16-bit LoRA")
    assert pair[1:] == ["0, 1", "-25.0 [-215.6, +165.6] (n=2)", "-15.0 [-205.6, +175.6] (n=2)",
                        "+0.000 [+0.000, +0.000] (n=2)", "+0.5000 [+0.5000, +0.5000] (n=2)"]
    # AQN - NVFP4: +20 and 0 points (the same NVFP4 base, so the gain differences equal them)
    assert table_row(md, "NVFP4 LoRA + AQN - NVFP4 LoRA")[2:4] == ["+10.0 [-117.1, +137.1] (n=2)"] * 2
    # each arm's seeds, base and final, as the pretrained layout renders them
    assert "### arm: lora_nvfp4_aqn" in md
    assert table_row(md, "2 runs") == ["2 runs", "20.0 (one deterministic evaluation, the same in all 2 runs)",
                                       "60.0 ± 14.1 (n=2)", "+40.0 [-87.1, +167.1] (n=2)"]
