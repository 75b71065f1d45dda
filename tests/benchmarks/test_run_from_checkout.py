"""benchmarks/ and scripts/ are folders beside rlx/, not installed: they run from a checkout with `python -m`, and a
benchmark's child process finds them from any working directory through child_env (issue 59)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from benchmarks.common import child_env
from tests.conftest import ROOT

pytestmark = pytest.mark.integration


def _env_without_pythonpath() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"OMP_NUM_THREADS": "1"}


@pytest.mark.parametrize("module, usage", [("benchmarks.studies.scaling_table1", "--seeds"),
                                           ("benchmarks.predictive", "--scenarios"),
                                           ("scripts.lm_eval_check", "run,export,compare")])
def test_python_m_runs_from_the_checkout_root(module, usage):
    p = subprocess.run([sys.executable, "-m", module, "--help"], cwd=ROOT, env=_env_without_pythonpath(),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert usage in p.stdout


def test_child_env_lets_a_child_elsewhere_import_benchmarks(tmp_path, monkeypatch):
    monkeypatch.delenv("PYTHONPATH", raising=False)
    cmd = [sys.executable, "-c", "import benchmarks.common, sys; print(benchmarks.common.ROOT)"]
    bare = subprocess.run(cmd, cwd=tmp_path, env=_env_without_pythonpath(), capture_output=True, text=True)
    assert bare.returncode != 0 and "No module named 'benchmarks'" in bare.stderr  # the folder is not installed
    found = subprocess.run(cmd, cwd=tmp_path, env=child_env(), capture_output=True, text=True, timeout=120)
    assert found.returncode == 0, found.stderr[-2000:]
    assert found.stdout.strip() == str(ROOT)
