"""The training loop with episodes: rlx.train wraps the engine it builds in rlx.envs.wrap_engine."""

from __future__ import annotations

import pytest

from tests.conftest import TINY, compose, read_metrics


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_tiny_run_trains_on_multi_turn_episodes(tmp_path, monkeypatch, mode):
    import rlx.train
    from rlx.envs.registry import ENVIRONMENTS

    monkeypatch.setitem(ENVIRONMENTS, "echo", "tests.envs.helpers:EchoEnv")  # answers every turn: real multi-turn
    cfg = compose(TINY + ["env.name=echo", "env.max_turns=3", "env.turn_tokens=4", "rollout.max_new_tokens=16",
                          f"rollout.mode={mode}", "rollout.max_staleness=1", "train.steps=2", "train.eval_every=2",
                          "train.ckpt_every=2", "rollout.eval_k=0"])
    summary = rlx.train.run(cfg, tmp_path / "run")
    assert summary["status"] == "finished"
    rows = [r for r in read_metrics(tmp_path / "run") if r["step"] > 0 and "env/turns/mean" in r]
    # env/* count the episodes generated since the last report: async generates ahead, so a step may report none
    assert len(rows) == 2 if mode == "sync" else len(rows) >= 1
    for r in rows:
        assert r["env/turns/mean"] > 1 and r["env/env_tokens/mean"] > 0 and r["env/replies/mean"] > 0
        assert r["actor/grad_norm"] >= 0
    if mode == "sync":  # the trainer's log-probs are the engine's on the loss tokens (policy tokens only)
        assert all(abs(r["rollout/logprob_diff/mean"]) < 1e-3 for r in rows)


def test_the_episode_printer_runs_on_the_tiny_model(capsys, monkeypatch):
    """`python -m rlx.envs`: episodes of held-out problems, printed with the environment's tokens marked."""
    from rlx.envs.__main__ import main
    from rlx.envs.registry import ENVIRONMENTS

    monkeypatch.setitem(ENVIRONMENTS, "echo", "tests.envs.helpers:EchoEnv")
    main(["-n", "2", *TINY, "env.name=echo", "env.max_turns=2", "env.turn_tokens=4", "rollout.max_new_tokens=16",
          "rollout.temperature=1.0"])
    out = capsys.readouterr().out
    assert out.count("=====") == 2 and "[[ ok.]]" in out and "'env/turns/mean': 2.0" in out
    assert "trainer vs engine |log-prob|" in out
