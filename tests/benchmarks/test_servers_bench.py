"""`python -m benchmarks.servers` at its smallest: the colocated arm in sync mode through the real loop,
timed, printed and written. The server arms run the same code with other overrides (they start vLLM
servers, which tests/rollout/test_server.py exercises); async is timed in test_offpolicy_bench.py."""

import json

import pytest

from tests.conftest import TINY

pytestmark = pytest.mark.integration


def test_servers_bench_times_each_arm_and_mode(capsys, tmp_path):
    pytest.importorskip("vllm")
    from benchmarks.servers import main

    over = [o for o in TINY if not o.startswith(("train.", "trainer.", "logger.", "rollout.eval_k"))]
    over += ["model.hidden_size=64", "model.num_heads=2"]  # vLLM's CPU attention needs head_dim >= 32
    res = main(["--arms", "colocated", "--modes", "sync", "--no-merged", "--steps", "3", "--skip", "1", "--repeats", "1",
                "--work", str(tmp_path / "work"), "--out", str(tmp_path / "out.json"), *over])
    assert set(res) == {"colocated sync"}
    for m in res.values():
        assert m["step_s"] > 0 and m["gen_s"] > 0 and m["train_s"] > 0 and m["sync_s"] > 0
    assert res["colocated sync"]["wait_s"] == 0.0  # sync has no queue
    assert "1.00x colocated" in capsys.readouterr().out  # each arm against colocated in its mode
    assert json.loads((tmp_path / "out.json").read_text())["median"] == res
