"""`python -m benchmarks.offpolicy` at its smallest: both modes run through the real loop and are timed."""

import pytest

from tests.conftest import TINY

pytestmark = pytest.mark.integration


def test_offpolicy_bench_times_sync_and_async(capsys, tmp_path):
    from benchmarks.offpolicy import main

    over = [o for o in TINY if not o.startswith(("train.", "trainer.", "logger.", "rollout.eval_k"))]
    res = main(["--engines", "hf", "--threads", "1", "--steps", "3", "--skip", "1", "--repeats", "1",
                "--work", str(tmp_path), *over])
    r = res["hf threads=1"]
    assert r["sync"]["step_s"] > 0 and r["async"]["step_s"] > 0 and r["ratio_async_over_sync"] > 0
    assert r["sync"]["wait_s"] == 0.0  # sync has no queue
    assert "async/sync" in capsys.readouterr().out
