"""One process per run directory (rlx.run.lock): a second rlx.train on a directory that a live process holds is
refused before it builds or writes anything, in a sweep too, and a killed holder leaves no stale lock."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rlx.run.lock import LOCK, RunDirBusy, hold
from tests.conftest import ROOT, TINY, run_tiny

pytestmark = pytest.mark.integration

HOLDER = "import sys, time; from rlx.run.lock import hold; f = hold(sys.argv[1]); print('held', flush=True); time.sleep(600)"


def holder(run_dir: Path) -> subprocess.Popen:
    """Another process holding run_dir's lock until killed."""
    run_dir.mkdir(parents=True, exist_ok=True)
    p = subprocess.Popen([sys.executable, "-c", HOLDER, str(run_dir)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "held"
    return p


def test_a_held_directory_is_refused_naming_the_holder_and_free_once_it_is_killed(tmp_path):
    p = holder(tmp_path)
    try:
        with pytest.raises(RunDirBusy, match=rf"is in use by another rlx.train \(pid {p.pid} on .*, since "):
            hold(tmp_path)
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    f = hold(tmp_path)  # kill -9 released it: no stale lock
    assert (tmp_path / LOCK).read_text().startswith(f"pid {os.getpid()} on ")
    f.close()


def test_training_on_a_held_directory_writes_nothing(tmp_path):
    p = holder(tmp_path)
    try:
        with pytest.raises(RunDirBusy, match="give this run another hydra.run.dir"):
            run_tiny(tmp_path, ["train.steps=2"])
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    assert sorted(x.name for x in tmp_path.iterdir()) == [LOCK]  # no metrics.jsonl, summary.json or ckpt


def test_a_sweep_job_on_a_held_directory_fails_alone_and_leaves_the_holders_files(tmp_path):
    job = tmp_path / "job"
    p = holder(job)
    try:
        out = subprocess.run([sys.executable, "-m", "rlx.train", "-m", *TINY, "train.steps=2", "logger.mode=disabled",
                              f"hydra.sweep.dir={tmp_path}", "hydra.sweep.subdir=job"],
                             cwd=ROOT, capture_output=True, text=True, timeout=300)
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    # the sweep goes on (exit 0, the job reported failed) and writes no summary.json into the held directory:
    # the process holding it writes its own
    assert out.returncode == 0, out.stderr[-2000:]
    said = out.stdout + out.stderr
    assert "is in use by another rlx.train" in said and "failed; continuing with the other jobs" in said
    assert not (job / "summary.json").exists() and not (job / "metrics.jsonl").exists()
