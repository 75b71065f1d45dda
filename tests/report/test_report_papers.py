"""The report's inputs: arms from sweeps/*.yaml, labels and published numbers from rlx/report/papers.yaml only."""

from __future__ import annotations

import yaml

from rlx.report.build import LAYOUTS
from rlx.report.sweeps import papers
from rlx.sweeps.spec import arm_axis, arm_settings
from tests.conftest import CONF


def test_each_layouts_arms_are_its_sweep_files_axis():
    assert {name: arm_axis(name)[0] for name in LAYOUTS} == {
        "qerl_table1": "qerl_arm", "qerl_speed": "quant", "next_table": "next_arm", "scalerl_losses": "algo",
        "scalerl_loo": "loo_arm", "scalerl_offpolicy": "offpolicy_arm",
        "mini_qerl": "qerl_arm", "mini_next": "mini_next_arm", "mini_scalerl": "algo",
        "smollm2_wordproblems": None,  # seeds only: its arm is the job's rollout engine
        "smollm2_tune": None,  # sweeps algo.lr, no config group: its arm is the job's setting
        "smollm2_qerl": "qerl_arm",
        "smollm2_qerl_tuned": "qerl_tuned_arm",  # an arm file per (arm, lr); the report's arm is read from the config
        "smollm2_next": "smollm2_next_arm"}
    # a calibrated mini testbed renders with its paper sweep's tables
    for mini, paper in [("mini_qerl", "qerl_table1"), ("mini_next", "next_table"), ("mini_scalerl", "scalerl_losses")]:
        assert (LAYOUTS[mini].tables, LAYOUTS[mini].infer) == (LAYOUTS[paper].tables, LAYOUTS[paper].infer)
    assert set(arm_axis("mini_next")[1]) <= set(papers()["next"]["labels"]) | {"none_n", "none_long", "next"}
    assert arm_axis("scalerl_losses")[1] == ("grpo", "dapo", "cispo", "gspo", "scalerl")
    # every arm of an arm group has a file, and every labelled arm is an arm of its sweep
    for sweep, labels in [("qerl_table1", papers()["qerl"]["labels"]), ("next_table", papers()["next"]["labels"]),
                          ("scalerl_loo", papers()["scalerl"]["loo_labels"]),
                          ("scalerl_offpolicy", papers()["scalerl"]["offpolicy_labels"])]:
        key, arms = arm_axis(sweep)
        assert set(arms) == set(arm_settings(key)), sweep
        assert set(labels) - {"full_ft"} <= set(arms), sweep


def test_loo_components_are_read_from_the_arm_files():
    settings = arm_settings("loo_arm")
    assert settings["scalerl"] == {}  # the full recipe reverts nothing
    assert settings["loss_ppo_clip"] == {"algo.loss": "ppo_clip", "algo.eps_low": 0.2, "algo.eps_high": 0.28}
    assert settings["no_interruption"] == {"rollout.interrupt.enabled": False}


def test_the_experiment_files_quote_the_same_published_numbers():
    expected = {p.stem: yaml.safe_load(p.read_text())["paper"]["expected"] for p in (CONF / "experiment").glob("*.yaml")
                if "paper" in yaml.safe_load(p.read_text())}  # the testbeds (mini_*, smollm2) quote no paper numbers
    assert set(expected) == {"qerl_gsm8k_7b", "next_qwen2.5_7b", "scalerl_8b"}
    qerl = papers()["qerl"]["table1"]["Qwen2.5-7B (paper)"]
    names = {"bf16_base": "base_none", "nvfp4_base": "base_nvfp4", "bf16_lora": "lora_none", "nf4_lora": "lora_nf4",
             "mxfp4_lora": "lora_mxfp4", "nvfp4_lora": "lora_nvfp4", "nvfp4_lora_aqn": "lora_nvfp4_aqn"}
    assert {k: qerl[v] for k, v in names.items()} == expected["qerl_gsm8k_7b"]
    nxt = papers()["next"]["table"]
    assert {"backbone": nxt["base"]["7B"]["acc"], "grpo_lora_250": nxt["none_n"]["7B"]["acc"],
            "grpo_lora_400": nxt["none_long"]["7B"]["acc"], "next_250": nxt["next"]["7B"]["acc"]} == expected[
        "next_qwen2.5_7b"]
    fit = papers()["scalerl"]["table1"]["ScaleRL"]
    assert {"A": fit["A"], "B": fit["B"], "C_mid_gpu_hours": fit["C_mid"]} == expected["scalerl_8b"]
