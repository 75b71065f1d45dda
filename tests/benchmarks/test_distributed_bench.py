"""`python -m benchmarks.distributed`: the table from measured runs (fast, runs stubbed) and, marked slow, the
real thing at its smallest (the torchrun launches themselves are tested in tests/run/test_distributed.py)."""

import pytest

from tests.conftest import TINY


def test_distributed_bench_ratios_and_table(capsys, tmp_path, monkeypatch):
    import benchmarks.distributed as B

    seen = []

    def fake(run_dir, procs, threads, strategy, a):
        seen.append((procs, threads, strategy))
        return {"step_s": 0.1 * (procs + threads + (strategy == "fsdp")), "gen_s": 0.05, "train_s": 0.05}

    monkeypatch.setattr(B, "run_once", fake)
    res = B.main(["--cores", "2", "--steps", "5", "--work", str(tmp_path)])
    assert seen == [(1, 1, "ddp"), (1, 2, "ddp"), (2, 1, "ddp"), (2, 1, "fsdp")]
    out = capsys.readouterr().out
    rows = {line[:24].strip(): line[24:].split() for line in out.splitlines()[2:]}
    assert rows["2 ranks DDP"] == ["0.300", "0.050", "0.050", "1.50"]  # 0.3 s / 0.2 s of 1 process x 1 thread
    assert rows["2 ranks FSDP"][0] == "0.400" and rows["2 ranks FSDP"][-1] == "2.00"
    assert res["1 process, 2 threads"]["step_s"] == pytest.approx(0.3)


@pytest.mark.integration
@pytest.mark.slow
def test_distributed_bench_times_one_process_and_two_ranks(capsys, tmp_path):
    from benchmarks.distributed import main

    over = [o for o in TINY if not o.startswith(("train.", "trainer.", "logger.", "rollout.eval_k"))]
    res = main(["--cores", "2", "--steps", "3", "--skip", "0", "--work", str(tmp_path), *over])
    assert set(res) == {"1 process, 1 thread", "1 process, 2 threads", "2 ranks DDP", "2 ranks FSDP"}
    assert all(r["step_s"] > 0 and r["gen_s"] > 0 and r["train_s"] > 0 for r in res.values())
    assert "2 ranks FSDP" in capsys.readouterr().out
    assert (tmp_path / "arm2" / "summary.json").read_text().count('"world_size": 2') == 1
