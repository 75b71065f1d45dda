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


def test_per_turn_rewards_reach_the_rewards_and_advantages(tmp_path, monkeypatch):
    """An environment paying 0.25 per policy token: the rewards the update gets (and computes advantages from)
    are the task's plus 0.25 x each row's policy tokens, counted here from the batch; the logged means agree."""
    import torch

    import rlx.train
    from rlx.algo.advantages import compute_advantages
    from rlx.algo.policy_update import Update
    from rlx.envs.registry import ENVIRONMENTS

    monkeypatch.setitem(ENVIRONMENTS, "token_reward", "tests.envs.helpers:TokenRewardEnv")
    seen, prepare = [], Update.prepare

    def spy(self, batch, rewards, dp):
        prep = prepare(self, batch, rewards, dp)
        seen.append((batch, rewards.clone(), prep.adv.cpu().clone(), self.algo))
        return prep

    monkeypatch.setattr(Update, "prepare", spy)
    cfg = compose(TINY + ["env.name=token_reward", "env.max_turns=3", "env.turn_tokens=4", "rollout.max_new_tokens=16",
                          "train.steps=2", "train.eval_every=2", "train.ckpt_every=2", "rollout.eval_k=0"])
    assert rlx.train.run(cfg, tmp_path / "run")["status"] == "finished"
    rows = [r for r in read_metrics(tmp_path / "run") if r["step"] > 0 and "train/reward/mean" in r]
    assert len(seen) == len(rows) == 2
    for (batch, rewards, adv, algo), r in zip(seen, rows):
        env = 0.25 * batch.loss_mask.sum(1).float()  # [N] by hand: every policy token paid 0.25
        assert torch.equal(batch.env_reward, env) and (env > 0).all()
        task = rewards - env
        assert set(task.tolist()) <= {0.0, 1.0}  # arith's `correct`, 0 or 1
        assert r["train/rewards/correct"] == pytest.approx(task.mean().item())
        assert r["train/env_reward/mean"] == pytest.approx(env.mean().item())
        assert r["train/reward/mean"] == pytest.approx(task.mean().item() + env.mean().item())
        group = torch.unique(batch.group, return_inverse=True)[1]
        torch.testing.assert_close(adv, compute_advantages(rewards, group, algo))
        assert not torch.allclose(adv, compute_advantages(task, group, algo))  # the env's part moved them


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
