"""`python -m rlx.bench.distributed` at its smallest: 1 process and 2 torchrun ranks (DDP, FSDP) timed."""

from tests.conftest import TINY


def test_distributed_bench_times_one_process_and_two_ranks(capsys, tmp_path):
    from rlx.bench.distributed import main

    over = [o for o in TINY if not o.startswith(("train.", "trainer.", "logger.", "rollout.eval_k"))]
    res = main(["--cores", "2", "--steps", "3", "--skip", "0", "--work", str(tmp_path), *over])
    assert set(res) == {"1 process, 1 thread", "1 process, 2 threads", "2 ranks DDP", "2 ranks FSDP"}
    assert all(r["step_s"] > 0 and r["gen_s"] > 0 and r["train_s"] > 0 for r in res.values())
    out = capsys.readouterr().out
    assert "2 ranks FSDP" in out and "vs 1x1" in out
    assert (tmp_path / "arm2" / "summary.json").read_text().count('"world_size": 2') == 1
