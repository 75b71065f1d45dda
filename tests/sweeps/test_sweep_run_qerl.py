"""The QeRL sweeps, launched with their one command at smoke size; rlx.report on the real outputs."""

from __future__ import annotations

import pytest

from rlx import report as R
from rlx.run.records import read_metrics
from tests.faults import fail_overrides
from tests.sweeps.sweep_helpers import BATCH, SMOKE, job_dirs, overrides, run_sweep, summary
from tests.report.test_report import table_row

pytestmark = pytest.mark.integration

QERL_ARMS = ["base_none", "base_nf4", "base_mxfp4", "base_nvfp4", "lora_none", "lora_nf4", "lora_mxfp4",
             "lora_nvfp4", "lora_nvfp4_aqn"]


@pytest.fixture(scope="module")
def qerl_sweep(tmp_path_factory):
    root = tmp_path_factory.mktemp("qerl_table1")
    run_sweep("qerl_table1", root, SMOKE + BATCH + ["seed=0", "train.steps=2"])
    return root


def test_qerl_table1_runs_every_arm(qerl_sweep):
    import yaml

    jobs = job_dirs(qerl_sweep)
    assert [overrides(j)["qerl_arm"] for j in jobs] == QERL_ARMS
    for job in jobs:
        s = summary(job)
        assert s["status"] == "finished", (job, s)
        cfg = yaml.safe_load((job / ".hydra/config.yaml").read_text())
        arm = overrides(job)["qerl_arm"]
        assert cfg["quant"]["format"] == arm.split("_")[1]
        assert cfg["noise"]["type"] == ("aqn" if arm.endswith("aqn") else "none")
        assert cfg["logger"]["group"] == "qerl_table1"
        steps = [r["step"] for r in read_metrics(job)]
        assert steps == [0, 1, 2]


def test_report_renders_the_table_and_curves_of_a_real_sweep(qerl_sweep, capsys):
    assert R.main([str(qerl_sweep)]) == 0
    md = (qerl_sweep / "report.md").read_text()
    assert md in capsys.readouterr().out
    header = table_row(md, "model")
    ours = dict(zip(header, table_row(md, "rlx tiny (this sweep)")))
    labels = dict(zip(QERL_ARMS, header[1:5] + header[6:]))
    for job in job_dirs(qerl_sweep):  # every cell is the job's own summary.json number
        arm, s = overrides(job)["qerl_arm"], summary(job)
        value = s["val/acc_base"] if arm.startswith("base") else s["val/acc"]
        assert ours[labels[arm]] == f"{100 * value:.1f} (n=1)", arm
        assert f"| {job.name} | {arm} | 0 | finished |" in md
    assert "python -m rlx.train -m --config-dir sweeps --config-name qerl_table1" in md
    from matplotlib.image import imread

    img = imread(qerl_sweep / "report_curves.png")  # [H, W, 4]
    assert img.shape[0] > 200 and img.shape[1] > 600 and img[..., :3].std() > 0.05


def test_a_failing_arm_does_not_stop_the_others_and_is_marked_failed(tmp_path):
    # lora_nvfp4_aqn dies while building (noise.sigma_end=0 is rejected by AQN's geometric schedule, which
    # only AQN arms build; every arm accepts the value itself), lora_nvfp4
    # is forced to fail at step 2 (tests/faults.py), base_none (0 steps) finishes after both.
    # launched as a real `python -m rlx.train -m ...` process: the sweep survives its failing jobs
    run_sweep("qerl_table1", tmp_path, SMOKE + BATCH + [
        "qerl_arm=lora_nvfp4_aqn,lora_nvfp4,base_none", "seed=0", *fail_overrides(2), "noise.sigma_end=0"],
        in_process=False)
    aqn, lora, base = job_dirs(tmp_path)
    assert not (aqn / "metrics.jsonl").exists()  # died before its first evaluation
    assert summary(aqn) is None or summary(aqn)["status"] == "failed"
    s = summary(lora)
    assert s["status"] == "failed" and "forced failure" in s["error"]
    assert [r["step"] for r in read_metrics(lora)] == [0, 1]
    s = summary(base)
    assert s["status"] == "finished" and s["steps"] == 0 and s["val/acc"] == s["val/acc_base"]

    md, _ = R.build_report(tmp_path, plots=False)
    ours = dict(zip(table_row(md, "model"), table_row(md, "rlx tiny (this sweep)")))
    assert ours["NVFP4 LoRA"] == "1 failed"
    aqn_failed = summary(aqn) is not None  # killed before or after it wrote summary.json
    assert ours["NVFP4 LoRA + AQN"] == ("1 failed" if aqn_failed else "1 not finished")
    assert ours["16-bit base"] == f"{100 * s['val/acc_base']:.1f} (n=1)"
    assert ("| 0 | lora_nvfp4_aqn | 0 | incomplete |" in md) or ("| 0 | lora_nvfp4_aqn | 0 | failed |" in md)
    assert "| 1 | lora_nvfp4 | 0 | failed |" in md and "forced failure" in md
    assert ("2 failed, 0 not finished" if aqn_failed else "1 failed, 1 not finished (without summary.json") in md
