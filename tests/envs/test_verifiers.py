"""env=verifiers: a verifiers environment (classic API) driven through rlx's engine, on the tiny model and the hf
engine. Skipped where verifiers is not installed (`pip install -e ".[envs]"`)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

pytest.importorskip("verifiers", reason="verifiers is not installed (the envs extra: pip install -e '.[envs]')")

from rlx.envs.driver import Budget  # noqa: E402
from rlx.envs.ecosystem.vf_client import Refused  # noqa: E402
from rlx.envs.ecosystem.vf_engine import VerifiersEngine  # noqa: E402
from rlx.envs.ecosystem.vf_load import load, render, rows  # noqa: E402
from rlx.models.forward import token_logprobs  # noqa: E402
from rlx.rollout import SamplingParams  # noqa: E402
from tests.envs.helpers import lazy_engines  # noqa: E402

HERE = Path(__file__).resolve().parent
ARITH = str(HERE / "vf_arith_env.py")  # loaded by path, as a user's environment file
EXAMPLE = str(HERE.parents[1] / "examples" / "envs" / "wordproblems_vf.py")
TEMPLATE = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}</{{ m['role'] }}>\n{% endfor %}"
            "{% if add_generation_prompt %}<assistant>{% endif %}")
BRIDGE = "</assistant>\n<user>Again?</user>\n<assistant>"  # what the template writes between two replies
FP32_MAX = 2e-3  # per-token |trainer - engine| in fp32 (tests/envs/test_hf.py)


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    """{engine name: (engine, policy, tok)} over one tiny policy with TEMPLATE as its chat template, each built on first use."""
    yield from lazy_engines(tmp_path_factory.mktemp("vf_policy"), TEMPLATE)


@pytest.fixture
def served(engines):
    return engines("hf")


def episodes(served, args: dict, n: int = 2, max_tokens: int = 70, turn_tokens: int = 5, seeds=None, k=None):
    engine, policy, tok = served
    env = load(ARITH, args)
    prompts = [render(tok, r["prompt"]) for r in rows(env, "train")][:k]
    vf_engine = VerifiersEngine(engine, env, tok, Budget(max_turns=4, turn_tokens=turn_tokens), "arith")
    batch = vf_engine.generate(prompts, n, SamplingParams(max_tokens=max_tokens), torch.Generator().manual_seed(0),
                               seeds=seeds)
    return batch, vf_engine


def test_an_environment_loads_from_a_file_a_folder_or_a_module(tmp_path, monkeypatch):
    assert type(load(ARITH, {"kind": "followup"})).__name__ == "FollowUp"
    folder = tmp_path / "my-env"  # an Environments Hub layout: my-env/my_env.py
    folder.mkdir()
    shutil.copy(ARITH, folder / "my_env.py")
    assert type(load(str(folder), {})).__name__ == "SingleTurnEnv"
    monkeypatch.syspath_prepend(str(folder))
    assert len(rows(load("my-env", {"n": 3}), "train")) == 3  # a module name, '-' read as '_'
    with pytest.raises(ValueError, match="no such file or folder, and no importable module"):
        load("no_such_env_anywhere", {})


@pytest.mark.parametrize("name", ["hf", pytest.param("vllm", marks=pytest.mark.integration)])
def test_sampled_tokens_score_as_the_engine_sampled_them_and_the_template_is_context(engines, name):
    """Two replies per episode: the trainer's log-probs of every sampled token are the engine's, and every
    token between the replies (the template's closing, the user's message, the next header) is `forced`."""
    served = engines(name)
    _, policy, tok = served
    batch, vf_engine = episodes(served, {"kind": "followup", "n": 4, "max_turns": 2})
    with torch.no_grad():
        trainer = token_logprobs(policy, batch.input_ids, batch.attention_mask, batch.completion_ids.shape[1], 1.0)
    loss = batch.loss_mask.bool()
    assert (trainer - batch.logprobs)[loss].abs().max().item() < FP32_MAX
    episodes_ = list(vf_engine._window)
    for r, ep in enumerate(episodes_):
        assert [t.role for t in ep.turns] == ["policy", "env", "policy"]
        env_ids = ep.turns[1].ids
        assert tok.decode(env_ids) == BRIDGE
        assert int(batch.forced[r].sum()) == len(env_ids)  # the env's tokens, every one of them, none other
        assert int(loss[r].sum()) == len(ep.turns[0].ids) + len(ep.turns[2].ids)
        assert batch.texts[r] == ep.turns[2].text  # the last reply, carrying the conversation the rubric scores
        assert batch.texts[r].state["completion"][-1]["content"] == ep.turns[2].text


def test_concurrent_episodes_share_one_engine_call_per_wave(served, monkeypatch):
    engine = served[0]
    calls = []
    generate = engine.generate

    def spy(prompts, *args, **kwargs):
        calls.append(len(prompts))
        return generate(prompts, *args, **kwargs)

    monkeypatch.setattr(engine, "generate", spy)
    batch, _ = episodes(served, {"kind": "followup", "n": 4, "max_turns": 2})
    assert calls == [8, 8]  # 4 prompts x 2 episodes, two replies each: two engine calls


def test_an_episode_does_not_depend_on_its_batch(served):
    seeds = [11, 12, 13, 14, 15, 16, 17, 18]
    whole, _ = episodes(served, {"kind": "followup", "n": 4, "max_turns": 2}, seeds=seeds)
    part, _ = episodes(served, {"kind": "followup", "n": 4, "max_turns": 2}, seeds=seeds[:4], k=2)
    for r in range(4):
        a = whole.completion_ids[r][whole.completion_mask[r].bool()]
        b = part.completion_ids[r][part.completion_mask[r].bool()]
        assert torch.equal(a, b)


def test_a_conversation_the_environment_rewrites_is_refused(served):
    with pytest.raises(Refused, match="rewrote the conversation"):
        episodes(served, {"kind": "rewrite", "n": 2, "max_turns": 2})


@pytest.mark.integration
@pytest.mark.parametrize("env_id,args,mode", [
    (EXAMPLE, {"n_train": 24, "n_eval": 4, "steps": 1, "max_operand": 9}, "sync"),
    (ARITH, {"kind": "followup", "n": 8, "max_turns": 2, "eval_n": 4}, "sync"),
    (ARITH, {"kind": "followup", "n": 8, "max_turns": 2, "eval_n": 4}, "async")],
    ids=["example-single-turn", "follow-up", "follow-up-async"])
def test_one_training_step_on_a_verifiers_environment(tmp_path, monkeypatch, env_id, args, mode):
    """rlx.train end to end: the environment's rows are the prompts, its rubric's functions the logged rewards,
    the update's loss is on sampled tokens only and the trainer's log-probs are the engine's."""
    import rlx.train
    from rlx.algo.policy_update import Update
    from tests.conftest import TINY, compose, read_metrics

    cfg = compose(TINY + ["env=verifiers", f"env.id={env_id}", "rollout.max_new_tokens=64", "env.turn_tokens=8",
                          "model.max_position_embeddings=512", "train.steps=1", "train.eval_every=1",
                          "train.ckpt_every=1", "rollout.eval_k=0", "rollout.prompts_per_step=2",
                          "rollout.group_size=2", "model.sft.steps=5", f"rollout.mode={mode}",
                          "rollout.max_staleness=1"])
    cfg.env.args = args
    cfg.model.chat_template = TEMPLATE
    seen, prepare = [], Update.prepare

    def spy(self, batch, rewards, dp):
        seen.append(batch)
        return prepare(self, batch, rewards, dp)

    monkeypatch.setattr(Update, "prepare", spy)
    assert rlx.train.run(cfg, tmp_path / "run")["status"] == "finished"
    (row,) = [r for r in read_metrics(tmp_path / "run") if r["step"] == 1 and "train/reward/mean" in r]
    names = ["correct_answer", "states_an_answer"] if env_id == EXAMPLE else ["exact", "replies", "asks_per_group"]
    for name in names:
        assert f"train/rewards/{name}" in row, sorted(row)
    assert row["env/episodes"] >= 4 or mode == "async"  # async generates ahead: a step may report none
    if mode == "sync":  # the trainer's log-probs are the engine's on the sampled tokens
        assert abs(row["rollout/logprob_diff/mean"]) < 1e-3
    (batch,) = seen
    assert not (batch.loss_mask.bool() & batch.forced).any()
    if env_id == ARITH:  # every episode's second reply follows the template's tokens, all forced
        assert row["env/env_tokens/mean"] > 0 and batch.forced.any()
