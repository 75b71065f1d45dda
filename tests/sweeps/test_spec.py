"""rlx.sweeps.spec: the sweeps sweeps/ holds, the command that runs one and its sweep directory."""

from __future__ import annotations

from rlx.sweeps import spec as S
from tests.sweeps.sweep_helpers import SWEEP_NAMES


def test_every_sweep_is_found_and_the_sweep_dir_is_fixed():
    assert sorted(S.available()) == SWEEP_NAMES
    d, ov = S.sweep_dir_of("next_table", ["seed=0"])
    assert d.startswith("outputs/sweeps/next_table/") and ov == ["seed=0", f"hydra.sweep.dir={d}"]
    assert S.sweep_dir_of("x", ["hydra.sweep.dir=/tmp/s", "a=1"]) == ("/tmp/s", ["hydra.sweep.dir=/tmp/s", "a=1"])
    # a sweep file with a fixed hydra.sweep.dir (no ${now:...}) keeps it, so the same command resumes it
    assert S.fixed_sweep_dir("next_table") is None and S.fixed_sweep_dir("no_such_sweep") is None
    assert S.sweep_dir_of("smollm2_next", ["seed=0"]) == (
        "outputs/sweeps/smollm2_next/N50", ["seed=0", "hydra.sweep.dir=outputs/sweeps/smollm2_next/N50"])
    assert S.sweep_dir_of("smollm2_next", ["hydra.sweep.dir=/tmp/s"])[0] == "/tmp/s"
    cmd = S.train_command("qerl_table1", ["seed=0"])
    assert cmd[1:] == ["-m", "rlx.train", "-m", "--config-dir", str(S.SWEEPS_DIR), "--config-name", "qerl_table1",
                       "seed=0"]
