"""rlx.sweeps.cli: the launcher's command line (`python -m rlx.sweeps`, console script rlx-sweep)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rlx.sweeps import cli as S
from tests.conftest import ROOT
from tests.sweeps.sweep_helpers import SWEEP_NAMES


def test_list_and_an_unknown_sweep(capsys):
    assert S.main(["--list"]) == 0 and "scalerl_loo" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        S.main(["no_such_sweep"])


@pytest.mark.integration
def test_python_m_rlx_sweeps_lists_every_sweep():
    p = subprocess.run([sys.executable, "-m", "rlx.sweeps", "--list"], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    assert [line.split()[0] for line in p.stdout.splitlines()] == SWEEP_NAMES


def test_sweep_launcher_options_may_follow_the_overrides(monkeypatch, capsys):
    # `python -m rlx.sweeps NAME seed=1 --no-report` sent --no-report on to rlx.train, which refused it
    ran = []
    monkeypatch.setattr(subprocess, "run", lambda cmd: ran.append(cmd) or subprocess.CompletedProcess(cmd, 0))
    assert S.main(["next_table", "seed=1", "--no-report", "hydra.sweep.dir=/tmp/s"]) == 0
    assert ran[0][-2:] == ["seed=1", "hydra.sweep.dir=/tmp/s"] and "--no-report" not in ran[0]
    assert "[sweep] report: python -m rlx.report /tmp/s" in capsys.readouterr().out
    parser = S.argparse.ArgumentParser()  # options with values move with their values, in either spelling
    parser.add_argument("name")
    parser.add_argument("overrides", nargs=S.argparse.REMAINDER)
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--no-report", action="store_true")
    argv = ["x", "a=1", "--rounds", "3", "b=2", "--rounds=4", "--no-report"]
    assert S._own_options_first(parser, argv) == ["--rounds", "3", "--rounds=4", "--no-report", "x", "a=1", "b=2"]
