"""rlx.report on hand-made sweep directories (known numbers)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from rlx import report as R


def make_job(root: Path, num: int, config: dict, overrides: list[str], summary: dict | None, rows: list[dict]) -> Path:
    """A job directory as `python -m rlx.train -m` writes it (only the files rlx.report reads)."""
    job = root / str(num)
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra/config.yaml").write_text(yaml.safe_dump(config))
    (job / ".hydra/overrides.yaml").write_text(yaml.safe_dump(overrides))
    if summary is not None:
        (job / "summary.json").write_text(json.dumps(summary))
    if rows:
        (job / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return job


def qerl_config(fmt: str, noise: str, steps: int, seed: int) -> dict:
    return {"seed": seed, "quant": {"format": fmt}, "noise": {"type": noise}, "train": {"steps": steps},
            "logger": {"group": "qerl_table1"}, "rollout": {"group_size": 4, "prompts_per_step": 4}}


def finished(acc: float, base: float, **extra) -> dict:
    return {"status": "finished", "val/acc": acc, "val/acc_base": base, "val/mean_at_k": acc / 2, "wall_s": 3.0,
            **extra}


def train_rows(entropy: float, steps: int = 4) -> list[dict]:
    rows = [{"step": 0, "val/acc": 0.1}]
    rows += [{"step": s, "train/reward/mean": 0.1 * s, "actor/entropy": entropy} for s in range(1, steps + 1)]
    return rows


def table_row(md: str, first_cell: str) -> list[str]:
    line = next(ln for ln in md.splitlines() if ln.startswith(f"| {first_cell} |"))
    return [c.strip() for c in line.strip("|").split("|")]


def test_qerl_cells_are_mean_and_std_over_finished_seeds_and_failures_are_marked(tmp_path):
    make_job(tmp_path, 0, qerl_config("nvfp4", "none", 4, 0), ["qerl_arm=lora_nvfp4", "seed=0"],
             finished(0.5, 0.2), train_rows(1.0))
    make_job(tmp_path, 1, qerl_config("nvfp4", "none", 4, 1), ["qerl_arm=lora_nvfp4", "seed=1"],
             finished(0.7, 0.2), train_rows(3.0))
    make_job(tmp_path, 2, qerl_config("nvfp4", "none", 4, 2), ["qerl_arm=lora_nvfp4", "seed=2"],
             {"status": "failed", "error": "RuntimeError: boom", "val/acc_base": 0.2}, [{"step": 0, "val/acc": 0.2}])
    make_job(tmp_path, 3, qerl_config("none", "none", 4, 0), ["qerl_arm=lora_none", "seed=0"], None, [])
    make_job(tmp_path, 4, qerl_config("none", "none", 0, 0), ["qerl_arm=base_none", "seed=0"],
             finished(0.25, 0.25), [{"step": 0, "val/acc": 0.25}])
    # no arm override: the arm comes from the config (an NF4 LoRA run)
    make_job(tmp_path, 5, qerl_config("nf4", "none", 4, 0), ["seed=0"], finished(0.4, 0.3), train_rows(2.0))

    md, pngs = R.build_report(tmp_path)
    header = table_row(md, "model")
    ours = dict(zip(header, table_row(md, "rlx tiny (this sweep)")))
    # hand-computed: mean(50, 70) = 60, sample std = sqrt(200) = 14.14
    assert ours["NVFP4 LoRA"] == "60.0 ± 14.1 (n=2, 1 failed)"
    # no summary.json (still running, killed, or crashed while being built outside a sweep): not counted as a failure
    assert ours["16-bit LoRA"] == "1 not finished"
    assert "6 jobs, 4 arms, 1 failed, 1 not finished (without summary.json" in md
    assert ours["16-bit base"] == "25.0 (n=1)"
    assert ours["NF4 LoRA (QLoRA)"] == "40.0 (n=1)"
    assert ours["NF4 base"] == "30.0 (n=1) †"  # from the NF4 LoRA run's step-0 evaluation (no base arm)
    assert ours["NVFP4 LoRA + AQN"] == "–"
    paper = dict(zip(header, table_row(md, "Qwen2.5-7B (paper)")))
    assert paper["NVFP4 LoRA + AQN"] == "90.8" and paper["16-bit base"] == "76.3" and paper["NF4 base"] == "–"
    # exploration table: mean entropy over steps of the finished seeds (1.0 and 3.0) -> 2.000 ± 1.414
    expl = table_row(md, "NVFP4 LoRA")
    assert expl[1] == "2.000 ± 1.414 (n=2, 1 failed)"
    # the jobs table marks each status
    assert "| 2 | lora_nvfp4 | 2 | failed |" in md and "RuntimeError: boom" in md
    assert "| 3 | lora_none | 0 | incomplete |" in md
    assert "| 5 | lora_nf4 | 0 | finished |" in md
    assert [p.name for p in pngs] == ["report_curves.png"] and pngs[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def sigmoid(c, a, b, c_mid, r0):
    return r0 + (a - r0) / (1.0 + (c_mid / c) ** b)


def test_scalerl_report_fits_recover_known_asymptotes_and_apply_the_rule(tmp_path):
    rng = np.random.default_rng(0)
    truth = {"scalerl": 0.6, "grpo": 0.4}
    num = 0
    for algo, a in truth.items():
        for seed in (0, 1):
            compute = np.arange(0, 41) * 1e9  # an evaluation every 1e9 flops
            reward = sigmoid(np.maximum(compute, 1.0), a, 2.0, 8e9, 0.2) + rng.normal(0, 0.005, compute.size)
            reward[0] = 0.2
            rows = [{"step": 5 * i, "val/mean_at_k": float(r), "perf/compute/flops": float(c)}
                    for i, (c, r) in enumerate(zip(compute, reward))]
            cfg = {"seed": seed, "algo": {"name": algo}, "logger": {"group": "scalerl_losses"},
                   "scaling": {"fit": "sigmoid", "metric": "val/mean_at_k", "compute": "flops", "bootstrap": 50}}
            make_job(tmp_path, num, cfg, [f"algo={algo}", f"seed={seed}"],
                     {"status": "finished", "val/mean_at_k": float(reward[-1])}, rows)
            num += 1
    md, pngs = R.build_report(tmp_path)
    for algo, a in truth.items():
        row = table_row(md, algo)
        assert abs(float(row[3].split()[0]) - a) <= 0.02, row  # A within ScaleRL's margin
        assert float(row[4].split()[0]) == pytest.approx(2.0, rel=0.25)  # B
    assert "scalerl (higher A)" in table_row(md, "grpo")[6]
    assert {p.name for p in pngs} == {"report_curves.png", "report_scaling.png"}


def test_next_report_counts_steps_to_reach_the_long_baselines_final_accuracy(tmp_path):
    def cfg(kind, steps, seed=0):
        return {"seed": seed, "train": {"steps": steps}, "logger": {"group": "next_table"},
                "extrapolation": {"type": kind, "extend_at": [30] if kind != "none" else []}}

    def evals(accs):
        return [{"step": 10 * i, "val/acc": a, "val/mean_at_k": a} for i, a in enumerate(accs)]

    long_accs = [0.1, 0.2, 0.3, 0.3, 0.4, 0.4, 0.45, 0.5, 0.5]  # steps 0..80, final 0.5
    make_job(tmp_path, 0, cfg("none", 80), ["next_arm=none_long"], finished(0.5, 0.1), evals(long_accs))
    make_job(tmp_path, 1, cfg("none", 50), ["next_arm=none_n"], finished(0.4, 0.1), evals([0.1, .2, .3, .3, .4, .4]))
    make_job(tmp_path, 2, cfg("next", 50), ["next_arm=next"], finished(0.55, 0.1), evals([0.1, .2, .3, .5, .5, .55]))
    md, _ = R.build_report(tmp_path, plots=False)
    assert table_row(md, "NExt predict-extend")[5] == "30 (1/1 seeds reach it)"
    assert table_row(md, "GRPO-LoRA, N steps")[5] == "not reached (0/1)"
    assert table_row(md, "GRPO-LoRA, 1.6N steps")[5] == "70 (1/1 seeds reach it)"
    assert table_row(md, "NExt predict-extend")[1] == "50" and table_row(md, "GRPO-LoRA, 1.6N steps")[1] == "80"


def test_layout_must_be_known(tmp_path):
    make_job(tmp_path, 0, {"seed": 0, "logger": {"group": None}}, [], finished(0.1, 0.1), [])
    with pytest.raises(ValueError, match="--layout"):
        R.build_report(tmp_path)
    md, _ = R.build_report(tmp_path, layout="qerl_speed", plots=False)
    assert "## QeRL speed" in md


def test_cli_writes_report_md_and_rejects_a_directory_without_jobs(tmp_path, capsys):
    with pytest.raises(SystemExit) as err:
        R.main([str(tmp_path)])
    assert err.value.code == 2 and "no job directory" in capsys.readouterr().err
    make_job(tmp_path, 0, qerl_config("none", "none", 0, 0), ["qerl_arm=base_none"], finished(0.3, 0.3),
             [{"step": 0, "val/acc": 0.3}])
    assert R.main([str(tmp_path), "--no-plots"]) == 0
    text = (tmp_path / "report.md").read_text()
    assert text in capsys.readouterr().out and "30.0 (n=1)" in text
