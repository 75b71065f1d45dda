"""The compare command on a real tiny multirun of two algo options; a run fits its own curve."""

import subprocess
import sys

import pytest

from rlx.run.records import read_run
from tests.conftest import ROOT, TINY

pytestmark = pytest.mark.integration


def test_compare_on_real_multirun(tmp_path):
    over = ["task.num_terms=2", "task.max_operand=6", "task.n_train=60", "task.n_eval=12", "model.sft.steps=60",
            "train.steps=4", "train.eval_every=1", "scaling=sigmoid", "scaling.bootstrap=20"]
    subprocess.run([sys.executable, "-m", "rlx.train", "-m", "algo=grpo,cispo", *TINY, *over,
                    f"hydra.sweep.dir={tmp_path}"], cwd=ROOT, check=True, capture_output=True, timeout=600)
    runs = sorted(p.parent for p in tmp_path.rglob("metrics.jsonl"))
    assert len(runs) == 2
    for r in runs:  # each run tried its own fit at the end: a result or a clear reason, never silence
        s = read_run(r).summary
        assert s["status"] == "finished" and ("scaling/A" in s or "scaling/error" in s)
    p = subprocess.run([sys.executable, "-m", "rlx.scaling", "compare", str(tmp_path)], cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    md = (tmp_path / "compare.md").read_text()
    assert "grpo" in md and "cispo" in md
    png = (tmp_path / "compare.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
