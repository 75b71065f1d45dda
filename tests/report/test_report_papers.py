"""The report's inputs: arms from sweeps/*.yaml, labels and published numbers from rlx/report/papers.yaml only."""

from __future__ import annotations

import yaml

import pytest

from rlx.report import spec as specs
from rlx.report.build import load_spec
from rlx.report.sweeps import papers
from rlx.sweeps.spec import arm_axis, arm_settings, available
from tests.conftest import CONF


def _spec(name: str):
    return load_spec([], layout=name)


def test_every_sweep_declares_a_report_that_validates():
    assert set(available()) <= set(specs.available())
    assert {name: _spec(name).arm_key for name in available()} == {
        "qerl_table1": "qerl_arm", "qerl_speed": "quant", "next_table": "next_arm", "scalerl_losses": "algo",
        "scalerl_loo": "loo_arm", "scalerl_offpolicy": "offpolicy_arm",
        "mini_qerl": "qerl_arm", "mini_next": "mini_next_arm", "mini_scalerl": "algo",
        "smollm2_wordproblems": None,  # seeds only: its arm is the job's rollout engine
        "smollm2_tune": None,  # sweeps algo.lr, no config group: its arm is the job's setting
        "smollm2_qerl": "qerl_arm",
        "smollm2_qerl_tuned": "qerl_tuned_arm",  # an arm file per (arm, lr); the report's arm is read from the config
        "smollm2_next": "smollm2_next_arm", "smollm2_scalerl": "smollm2_scalerl_arm"}
    assert _spec("smollm2_qerl_tuned").arm_from == "config"
    assert _spec("smollm2_gsm8k").kind == "runs"  # conf/experiment/smollm2_gsm8k.yaml: runs no sweep launched
    # a calibrated mini testbed renders with its paper sweep's sections
    for mini, paper in [("mini_qerl", "qerl_table1"), ("mini_next", "next_table"), ("mini_scalerl", "scalerl_losses")]:
        a, b = _spec(mini), _spec(paper)
        assert ([s for s, _ in a.sections], a.infer, a.labels) == ([s for s, _ in b.sections], b.infer, b.labels)


@pytest.mark.parametrize("block, message", [
    ({"title": "t", "sections": ["no_such"]}, "unknown section 'no_such'"),
    ({"title": "t", "sections": [{"accuracy": {"heading": "x", "colour": 1}}]}, "section accuracy: .*colour"),
    ({"title": "t", "sections": ["next"], "arm": {"infer": "nope"}}, "'infer' one of"),
    ({"title": "t", "sections": ["next"], "labels": "paper:nope"}, "papers.yaml has no nope.labels"),
    ({"title": "t", "sections": ["next"], "tables": []}, r"unknown key\(s\) \['tables'\]"),
    ({"sections": ["next"]}, "needs a title"),
    ({"title": "t", "kind": "runs", "sections": ["accuracy"]}, "unknown section 'accuracy'"),
])
def test_a_bad_report_block_is_refused_by_name(tmp_path, block, message):
    f = tmp_path / "mine.yaml"
    f.write_text(yaml.safe_dump({"report": block}))
    with pytest.raises(ValueError, match=message):
        load_spec([], spec_file=f)


def test_report_spec_arms_and_labels():
    s = _spec("scalerl_loo")
    assert s.arms == list(arm_axis("scalerl_loo")[1]) and s.labels == papers()["scalerl"]["loo_labels"]
    assert _spec("smollm2_qerl_tuned").arms == ["lora_none", "lora_nvfp4", "lora_nvfp4_aqn", "lora_nf4"]
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
