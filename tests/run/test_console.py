"""What a user sees: a single run logs its progress to the console and to <run_dir>/train.log."""

import subprocess
import sys

import pytest
from tests.conftest import ROOT, TINY


@pytest.mark.integration
def test_single_run_writes_train_log(tmp_path):
    run_dir = tmp_path / "run"
    subprocess.run([sys.executable, "-m", "rlx.train", *TINY, "train.steps=2", "train.log_every=1",
                    f"hydra.run.dir={run_dir}"], cwd=ROOT, check=True, capture_output=True, timeout=300)
    log = (run_dir / "train.log").read_text()
    for line in ("[eval] step 0 (SFT base): val/acc", "flexible-extract", "[step 1/2] reward", "[step 2/2] reward", "[eval] step 2: val/acc",
                 "[done] held-out"):
        assert line in log, line


def test_step_zero_is_labelled_with_what_it_evaluates():
    from rlx.train import base_label, _readings_text
    from tests.conftest import compose

    assert base_label(compose([])) == "SFT"  # the tiny model's warm start
    assert base_label(compose(["model.sft.steps=0"])) == "pretrained"  # a random init, no SFT
    assert base_label(compose(["experiment=smollm2_wordproblems"])) == "pretrained"  # SmolLM2 as shipped
    assert _readings_text({"val/acc": 0.5, "val/strict-match": 0.0, "val/flexible-extract": 0.25}) == \
        " (strict-match 0.000, flexible-extract 0.250)"
    assert _readings_text({"val/acc": 0.5}) == ""
