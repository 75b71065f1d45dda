"""benchmarks.env_throughput: its ratios on hand-made rows, and one small round whose three arms generate the
same tokens (the never-eos policy), so the printed ratios compare overheads only. Its figures are in
docs/envs.md, never a test's pass/fail."""

import pytest

from benchmarks import env_throughput as b


def test_ratios_are_medians_over_the_engine_arm():
    rows = [{"arm": "engine", "tok_s": 100.0, "tok_cpu_s": 200.0}, {"arm": "engine", "tok_s": 120.0, "tok_cpu_s": 180.0},
            {"arm": "verifiers", "tok_s": 90.0, "tok_cpu_s": 171.0}, {"arm": "verifiers", "tok_s": 30.0, "tok_cpu_s": 190.0}]
    # engine: medians 110 tok/s and 190 tok/CPU-s; verifiers: 60 and 180.5
    assert b.ratios(rows) == ["engine: 110 tok/s, 190 tok/CPU-s; / engine = 1.00 (wall), 1.00 (CPU)",
                              "verifiers: 60 tok/s, 180 tok/CPU-s; / engine = 0.55 (wall), 0.95 (CPU)"]


@pytest.mark.integration
def test_one_small_round_generates_the_same_tokens_in_every_arm(capsys):
    pytest.importorskip("verifiers", reason="verifiers is not installed (the envs extra)")
    lines = b.main(["--rounds", "1", "--prompts", "2", "--n", "2", "--max-tokens", "6"])
    assert [line.split(":")[0] for line in lines] == list(b.ARMS)
    tokens = [line for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert len(tokens) == 3 and all("'tokens': 24" in line for line in tokens)  # 2 prompts x 2 x 6 tokens
