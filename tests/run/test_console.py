"""What a user sees: a single run logs its progress to the console and to <run_dir>/train.log."""

import subprocess
import sys

from tests.conftest import ROOT, TINY


def test_single_run_writes_train_log(tmp_path):
    run_dir = tmp_path / "run"
    subprocess.run([sys.executable, "-m", "rlx.train", *TINY, "train.steps=2", "train.log_every=1",
                    f"hydra.run.dir={run_dir}"], cwd=ROOT, check=True, capture_output=True, timeout=300)
    log = (run_dir / "train.log").read_text()
    for line in ("[eval] step 0 (SFT base)", "[step 1/2] reward", "[step 2/2] reward", "[eval] step 2: val/acc",
                 "[done] held-out"):
        assert line in log, line
