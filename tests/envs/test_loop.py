"""The training loop with episodes: rlx.train wraps the engine it builds in rlx.envs.wrap_engine."""

from __future__ import annotations

import pytest

from tests.conftest import TINY, compose, read_metrics
from tests.envs.helpers import spy_updates


@pytest.mark.integration
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
    # the evaluation's per-problem file holds each episode whole (replies in [[...]]) beside its last turn,
    # the answer its rewards scored
    import json

    evals = [json.loads(line) for line in (tmp_path / "run" / "eval" / "step_2" / "completions.jsonl").read_text().splitlines()]
    episodes = [r for r in evals if "episode" in r]
    assert episodes, evals[:2]
    for r in episodes:
        assert r["episode"].count("[[ ok.]]") >= 1 and "[[" not in r["episode"].replace("[[ ok.]]", ""), r["episode"]
        assert r["episode"].rsplit("[[ ok.]]", 1)[1].startswith(r["completion"]), (r["episode"], r["completion"])


@pytest.mark.integration
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


# the suite's tiny model at head_dim 32 (vLLM's CPU attention needs >= 32), a small arith task (as
# tests/rollout/test_vllm_engine.py), and an SFT base that calls the calculator: half of its demonstrations
# write `<calc>1</calc>` before the answer (model.sft.demo_prefix), so the RL run's episodes hold tool calls
CALC_VLLM = ["model.hidden_size=64", "model.num_heads=2", "model.num_kv_heads=1", "task.num_terms=2",
             "task.max_operand=6", "task.n_train=60", "task.n_eval=8", "model.sft.steps=300",
             "model.sft.demo_prefix='<calc>1</calc>'", "model.sft.demo_prefix_frac=0.5", "env=calculator", "env.instructions=''",
             "rollout.max_new_tokens=64", "train.steps=2", "train.eval_every=2", "train.ckpt_every=2", "rollout.eval_k=0"]


def _check_calculator_batches(seen, rows) -> int:
    """Every batch the update trained on: each environment token is a calculator reply (`<result>v</result>`,
    v the calculator's value of the policy's call before it), counted, and out of the update's mask; every
    policy token is in it. Returns the environment tokens counted."""
    from rlx.envs import EnvConfig
    from rlx.envs.calc import calculate
    from rlx.envs.calculator import CLOSE, OPEN, RESULT
    from rlx.models.tokenizer import build_char_tokenizer

    tok, limits, total = build_char_tokenizer(), EnvConfig(name="calculator").calculator, 0
    for batch, mask in seen:
        counted = 0
        for r in range(len(batch)):
            L = int(batch.completion_mask[r].sum())
            ids, forced = batch.completion_ids[r, :L].tolist(), batch.forced[r, :L].tolist()
            runs, t = [], 0  # (role, token ids) in order
            while t < L:
                end = next((u for u in range(t, L) if forced[u] != forced[t]), L)
                runs.append(("env" if forced[t] else "policy", ids[t:end]))
                t = end
            for (role, span), nxt in zip(runs, runs[1:] + [(None, None)]):
                text = tok.decode(span)
                if role == "policy" and nxt and nxt[0] == "env":  # a call: the turn ends at its tag
                    assert text.endswith(CLOSE) and text.count(CLOSE) == 1, text
                    expr = text[text.rfind(OPEN) + len(OPEN): -len(CLOSE)] if OPEN in text else None
                    want = RESULT.format(calculate(expr, limits)) if expr is not None else None
                    reply = tok.decode(nxt[1])
                    assert reply == want or (want is None and reply.startswith("<result>error")), (text, reply)
                    counted += len(nxt[1])
                if role == "policy":
                    assert CLOSE not in text[: -len(CLOSE)]  # no call inside a turn: it ended at the first
        assert int(batch.forced.sum()) == counted  # every environment token is a reply counted above
        assert int(batch.completion_mask.sum()) - int(batch.loss_mask.sum()) == counted
        assert (mask[batch.forced] == 0).all() and (mask[batch.loss_mask.bool()] == 1).all()
        total += counted
    assert all(r["env/tool_calls/mean"] > 0 and r["env/env_tokens/mean"] > 0 for r in rows), [{k: v for k, v in r.items() if k.startswith(("env/", "train/rew"))} for r in rows]
    return total


# the server row starts a server (~35 s): `slow`, as what it adds is covered fast, a server's stop strings by
# tests/rollout/test_conformance.py, the environment's stop strings in each request by tests/envs/test_driver.py,
# and training on a local server with its canary by tests/rollout/test_server.py
@pytest.mark.integration
@pytest.mark.parametrize("engine,diff", [("hf", "rollout/logprob_diff/max"), ("vllm", "rollout/logprob_diff/mean"),
                                         pytest.param("vllm_server", "rollout/logprob_diff/max",
                                                      marks=pytest.mark.slow)])
def test_the_loop_trains_on_calculator_episodes_with_vllm(tmp_path, monkeypatch, engine, diff):
    """rollout=hf, rollout=vllm (sync) and rollout=vllm_server (one local server, adapter sync; the server ends each tool
    turn at `</calc>`: stop strings in the request) with env=calculator: trains end to end; every environment
    token is a calculator reply, counted, and outside the loss; the trainer's log-probs are the engine's on
    the policy's tokens."""
    if engine != "hf":
        pytest.importorskip("vllm")
    import time

    import rlx.train

    seen = spy_updates(monkeypatch)
    t0 = time.time()
    summary = rlx.train.run(compose(TINY + CALC_VLLM + [f"rollout={engine}"]), tmp_path / "run")
    assert summary["status"] == "finished"
    rows = [r for r in read_metrics(tmp_path / "run") if r["step"] > 0 and "env/turns/mean" in r]
    assert len(rows) == len(seen) == 2
    counted = _check_calculator_batches(seen, rows)
    print(f"[{engine} env=calculator] {counted} environment tokens, {time.time() - t0:.1f}s")
    assert counted > 0
    for r in rows:
        assert r["actor/grad_norm"] >= 0 and abs(r[diff]) < 1e-4
        if engine == "vllm_server":  # the server's adapter sync is checked by its canary each step
            assert r["rollout/sync_canary/mean_abs_diff"] < 1e-3


@pytest.mark.integration
@pytest.mark.parametrize("engine,mode", [
    ("vllm", "stale"), ("vllm", "async"),
    # the same on one local server (its start costs ~30 s each): marked slow to keep the suite inside CI's time
    pytest.param("vllm_server", "stale", marks=pytest.mark.slow),
    pytest.param("vllm_server", "async", marks=pytest.mark.slow)])
def test_calculator_episodes_on_vllm_in_stale_and_async_modes(tmp_path, monkeypatch, engine, mode):
    """rollout=vllm (colocated) or vllm_server with env=calculator under the stale schedule (each step's episodes from the policy exactly k
    updates back) and PipelineRL's async one (in-flight reloads inside and between turns): trains end to end,
    every environment token is a calculator reply outside the loss (counted), and the per-token versions keep
    the staleness bound across turns: at step s no token is older than s-1-k nor newer than s-1, versions never
    fall along an episode, and a row's version is its oldest token's."""
    pytest.importorskip("vllm")
    import torch

    import rlx.train

    k, steps = 1, 3
    seen = spy_updates(monkeypatch)
    cfg = compose(TINY + CALC_VLLM + [f"rollout={engine}", f"rollout.mode={mode}", f"rollout.max_staleness={k}",
                                      f"train.steps={steps}", f"train.eval_every={steps}", f"train.ckpt_every={steps}"])
    assert rlx.train.run(cfg, tmp_path / "run")["status"] == "finished"
    rows = [r for r in read_metrics(tmp_path / "run") if r["step"] > 0 and "env/turns/mean" in r]
    assert len(seen) == steps and rows  # async reports env/* only for the episodes generated since its last report
    assert _check_calculator_batches(seen, rows) > 0
    for s, (batch, _) in enumerate(seen, start=1):
        cm = batch.completion_mask.bool()  # [N, T]
        tv = batch.token_version  # [N, T], -1 on padding
        assert (tv[~cm] == -1).all() and (tv[cm] >= 0).all()
        lo, hi = int(tv[cm].min()), int(tv[cm].max())
        if mode == "stale":  # exactly k versions back (version 0, the start, until there are k updates)
            assert lo == hi == max(0, s - 1 - k), (s, lo, hi)
        else:
            assert s - 1 - k <= lo <= hi <= s - 1, (s, lo, hi)
        for r in range(len(batch)):
            v = tv[r, cm[r]]
            assert (v[1:] >= v[:-1]).all() and int(batch.version[r]) == int(v[0])


def test_the_episode_printer_runs_on_the_tiny_model(capsys, monkeypatch):
    """`python -m rlx.eval.episodes`: episodes of held-out problems, printed with the environment's tokens marked."""
    from rlx.eval.episodes import main
    from rlx.envs.registry import ENVIRONMENTS

    monkeypatch.setitem(ENVIRONMENTS, "echo", "tests.envs.helpers:EchoEnv")
    main(["-n", "2", *TINY, "env.name=echo", "env.max_turns=2", "env.turn_tokens=4", "rollout.max_new_tokens=16",
          "rollout.temperature=1.0"])
    out = capsys.readouterr().out
    assert out.count("=====") == 2 and "[[ ok.]]" in out and "'env/turns/mean': 2.0" in out
    assert "trainer vs engine |log-prob|" in out
