"""The multi-turn driver on a scripted engine: turns appended as token ids, the loss mask on the policy's
own tokens only, budgets, seeds, versions, and the engine adapter."""

from __future__ import annotations

import functools

import pytest
import torch

from rlx.envs import EnvConfig, env_factory
from rlx.envs.driver import Budget, run_episodes, stop_cut, turn_seed
from rlx.envs.engine import EnvEngine
from rlx.envs.format import TurnFormat
from rlx.models.tokenizer import build_char_tokenizer
from rlx.rollout.base import RolloutBatch, SamplingParams
from rlx.tasks.base import Example
from rlx.tasks.rewards import stated_answer
from tests.envs.helpers import EchoEnv, RewardEnv, ScriptedEngine

SP = SamplingParams(max_tokens=64)


@pytest.fixture
def tok():
    return build_char_tokenizer()


def calc_env(tok, **cfg):
    return env_factory(EnvConfig(name="calculator", instructions="", **cfg), tok)


def solver(context: str, call: int) -> str:
    """Calls the calculator once (and writes past the closing tag, which the driver drops), then answers."""
    if "<result>" not in context:
        return "18-2 is <calc>18-2</calc> and then more"
    return " so 16.\n#### 16|"


def ids(tok, text):
    return tok(text, add_special_tokens=False).input_ids


def test_a_tool_call_episode_token_by_token(tok):
    engine = ScriptedEngine(tok, solver)
    out = run_episodes(engine, calc_env(tok), ["Q1?", "Q2?"], 2, SP, torch.Generator().manual_seed(0), Budget())
    b = out.batch
    call, result = ids(tok, "18-2 is <calc>18-2</calc>"), ids(tok, "<result>16</result>")
    answer = ids(tok, " so 16.\n#### 16")
    whole = call + result + answer + [tok.eos_token_id]
    assert b.completion_ids.shape == (4, len(whole))
    for r in range(4):
        assert b.completion_ids[r].tolist() == whole and b.completion_mask[r].all()
        assert b.forced[r].tolist() == [len(call) <= t < len(call) + len(result) for t in range(len(whole))]
        # the policy's turns' behaviour log-probs (the scripted engine's, restarted per turn), 0 on the reply
        want = [-0.01 * (t + 1) for t in range(len(call))] + [0.0] * len(result) + \
               [-0.01 * (t + 1) for t in range(len(answer) + 1)]
        assert b.logprobs[r].tolist() == pytest.approx(want)
        assert b.texts[r] == " so 16.\n#### 16" and not b.truncated[r]
        assert b.prompt_ids[r, b.prompt_mask[r].bool()].tolist() == ids(tok, f"Q{r // 2 + 1}?")
    assert b.group.tolist() == [0, 0, 1, 1] and b.version.tolist() == [3] * 4
    assert (b.token_version == 3).all()  # the reply carries its policy neighbour's version
    # the second turn was sampled after the prompt, the kept call (not what was written past it) and the reply
    assert engine.calls[1]["prompts"][0] == ids(tok, "Q1?") + call + result
    assert stated_answer(b.texts[0], Example("k", "Q1?", "16")) == 1.0
    assert [ep.info for ep in out.episodes] == [{"tool_calls": 1.0, "tool_errors": 0.0}] * 4


def test_the_engine_is_given_the_environments_stop_strings(tok):
    """Each turn's engine call carries the environment's stop strings (SamplingParams.stop: the engine ends
    the turn at the tool call); an engine that writes past one (this one ignores them) is cut all the same."""
    engine = ScriptedEngine(tok, solver)
    out = run_episodes(engine, calc_env(tok), ["Q?"], 1, SP.but(stop=("STOP",)), None, Budget(), seeds=[1])
    assert [c["stop"] for c in engine.calls] == [("STOP", "</calc>")] * 2  # the caller's, then the environment's
    assert out.episodes[0].turns[0].ids == ids(tok, "18-2 is <calc>18-2</calc>")
    run_episodes(engine, functools.partial(EchoEnv, EnvConfig(), TurnFormat(tok)), ["Q?"], 1, SP, None,
                 Budget(max_turns=1), seeds=[1])
    assert engine.calls[-1]["stop"] == ()  # an environment without stop strings adds none


def test_the_loss_mask_excludes_every_environment_token(tok):
    """Count them: every reply token is in the forward (completion_mask) and out of the loss (loss_mask)."""
    engine = ScriptedEngine(tok, lambda ctx, call: f"step {call} <calc>{call}+1</calc>" if call < 3 else "#### 4|")
    out = run_episodes(engine, calc_env(tok), ["Q?"], 3, SamplingParams(max_tokens=200), torch.Generator().manual_seed(0),
                       Budget(max_turns=5))
    b = out.batch
    env_tokens = sum(len(t.ids) for ep in out.episodes for t in ep.turns if t.role == "env")
    policy_tokens = sum(len(t.ids) for ep in out.episodes for t in ep.turns if t.role == "policy")
    assert env_tokens == 3 * len(ids(tok, "<result>1</result><result>2</result><result>3</result>"))
    assert int(b.forced.sum()) == env_tokens and int(b.completion_mask.sum()) == env_tokens + policy_tokens
    assert int(b.loss_mask.sum()) == policy_tokens and not (b.loss_mask.bool() & b.forced).any()
    assert (b.logprobs[b.forced] == 0).all() and (b.logprobs[b.loss_mask.bool()] < 0).all()
    decoded = tok.decode(b.completion_ids[0, b.forced[0]].tolist())
    assert decoded == "<result>1</result><result>2</result><result>3</result>"
    assert [sum(t.role == "policy" for t in ep.turns) for ep in out.episodes] == [4, 4, 4]


def test_stop_cut_finds_the_first_token_that_completes_the_tag(tok):
    row = ids(tok, "a <calc>1</calc> b </calc>")
    assert stop_cut(tok, row, ("</calc>",)) == len("a <calc>1</calc>")
    assert stop_cut(tok, row, ()) is None and stop_cut(tok, ids(tok, "no tag"), ("</calc>",)) is None


def test_the_turn_budget_ends_an_episode_as_truncated(tok):
    engine = ScriptedEngine(tok, lambda ctx, call: "<calc>1+1</calc>")
    out = run_episodes(engine, calc_env(tok), ["Q?"], 1, SP, None, Budget(max_turns=2), seeds=[5])
    ep = out.episodes[0]
    assert [t.role for t in ep.turns] == ["policy", "env", "policy"] and ep.truncated and out.batch.truncated.all()
    assert out.batch.texts == ["<calc>1+1</calc>"] and len(engine.calls) == 2


def test_the_token_budget_covers_the_whole_episode(tok):
    """sampling.max_tokens bounds policy + environment tokens; a reply that leaves no room ends the episode."""
    engine = ScriptedEngine(tok, lambda ctx, call: "<calc>1+1</calc>")
    n_call, n_reply = len("<calc>1+1</calc>"), len("<result>2</result>")
    budget = 2 * n_call + n_reply + 5
    out = run_episodes(engine, calc_env(tok), ["Q?"], 1, SamplingParams(max_tokens=budget), None, Budget(max_turns=9),
                       seeds=[1])
    ep = out.episodes[0]
    assert [t.role for t in ep.turns] == ["policy", "env", "policy"] and ep.truncated
    assert ep.length == 2 * n_call + n_reply <= budget
    assert [c["max_tokens"] for c in engine.calls] == [budget, budget - n_call - n_reply]
    # a turn cut by the budget is cut before its tag, so it is no call
    out = run_episodes(engine, calc_env(tok), ["Q?"], 1, SamplingParams(max_tokens=10), None, Budget(), seeds=[1])
    assert [len(t.ids) for t in out.episodes[0].turns] == [10] and out.batch.truncated.all()


def test_turn_tokens_and_reply_tokens(tok):
    engine = ScriptedEngine(tok, lambda ctx, call: "x" * 30 + "|")
    out = run_episodes(engine, calc_env(tok), ["Q?"], 1, SP, None, Budget(turn_tokens=7), seeds=[1])
    assert [len(t.ids) for t in out.episodes[0].turns] == [7] and out.episodes[0].truncated
    assert engine.calls[0]["max_tokens"] == 7
    make = functools.partial(EchoEnv, EnvConfig(), TurnFormat(tok))
    engine = ScriptedEngine(tok, lambda ctx, call: "hi|")
    out = run_episodes(engine, make, ["Q?"], 1, SP, None, Budget(max_turns=3, reply_tokens=2), seeds=[1])
    assert [tok.decode(t.ids) for t in out.episodes[0].turns if t.role == "env"] == [" o", " o"]


def test_rows_with_different_budgets_share_one_engine_call(tok):
    """One call per turn serves every running episode; each row is cut to its own remaining budget."""
    engine = ScriptedEngine(tok, lambda ctx, call: ("<calc>1</calc>" if ctx.startswith("A") else "<calc>1+1+1+1</calc>")
                            if call == 0 else "y" * 40)
    out = run_episodes(engine, calc_env(tok), ["A", "B"], 1, SamplingParams(max_tokens=40), None, Budget(), seeds=[1, 2])
    assert len(engine.calls) == 2 and len(engine.calls[1]["prompts"]) == 2
    assert [ep.length for ep in out.episodes] == [40, 40] and out.batch.truncated.all()


def test_seeds_per_turn_depend_on_the_row_seed_only(tok):
    engine = ScriptedEngine(tok, solver)
    run_episodes(engine, calc_env(tok), ["Q?", "R?"], 1, SP, None, Budget(), seeds=[11, 22])
    assert engine.calls[0]["seeds"] == [11, 22]
    assert engine.calls[1]["seeds"] == [turn_seed(11, 1), turn_seed(22, 1)]
    assert len({turn_seed(11, t) for t in range(50)}) == 50 and all(0 <= turn_seed(s, 3) < 2**31 - 1 for s in range(99))
    g = torch.Generator().manual_seed(0)
    run_episodes(engine, calc_env(tok), ["Q?"], 2, SP, g, Budget())
    assert engine.calls[2]["seeds"] == torch.randint(2**31 - 1, (2,), generator=torch.Generator().manual_seed(0)).tolist()


def test_per_turn_rewards_are_summed_per_episode(tok):
    make = functools.partial(RewardEnv, EnvConfig(), TurnFormat(tok))
    out = run_episodes(ScriptedEngine(tok, lambda ctx, call: "a|"), make, ["Q?"], 2, SP, None, Budget(max_turns=3),
                       seeds=[1, 2])
    assert out.rewards.tolist() == [1.5, 1.5]


def test_the_engine_adapter_runs_episodes_and_delegates_the_rest(tok):
    inner = ScriptedEngine(tok, solver)
    engine = EnvEngine(inner, calc_env(tok), Budget())
    b = engine.generate(["Q?"], 3, SP, torch.Generator().manual_seed(0))
    assert isinstance(b, RolloutBatch) and len(b) == 3 and b.forced.any() and b.texts == [" so 16.\n#### 16"] * 3
    assert engine.tok is tok and engine.version == 3
    engine.between_steps = print  # the async schedule sets it on the engine it holds: it must reach the real one
    assert inner.between_steps is print and "between_steps" not in engine.__dict__
    m = engine.metrics()
    assert m["engine/x"] == 1.0 and m["env/episodes"] == 3 and m["env/turns/mean"] == 2.0
    assert m["env/tool_calls/mean"] == 1.0 and m["env/env_tokens/mean"] == len("<result>16</result>")
    assert "env/episodes" not in engine.metrics()  # a window per report


def test_the_adapter_passes_per_turn_rewards_on_as_a_column(tok):
    """Each episode's summed Step.reward is the batch's env_reward [N] (rlx.train.score adds it to the task's)."""
    engine = EnvEngine(ScriptedEngine(tok, lambda ctx, call: "a|"),
                       functools.partial(RewardEnv, EnvConfig(), TurnFormat(tok)), Budget(max_turns=2))
    b = engine.generate(["Q?", "R?"], 2, SP, torch.Generator().manual_seed(0))
    assert b.env_reward.dtype == torch.float32 and b.env_reward.tolist() == [1.0] * 4  # two turns of 0.5
    assert engine.metrics()["env/reward/mean"] == 1.0
    assert EnvEngine(ScriptedEngine(tok, solver), calc_env(tok), Budget()).generate(
        ["Q?"], 1, SP, None).env_reward.tolist() == [0.0]  # the calculator pays none


def test_the_batch_concatenates_and_selects_like_any_other(tok):
    engine = EnvEngine(ScriptedEngine(tok, solver), calc_env(tok), Budget())
    a = engine.generate(["Q?"], 2, SP, torch.Generator().manual_seed(0))
    plain = ScriptedEngine(tok, lambda ctx, call: "#### 3|").generate([ids(tok, "Q?")], 1, SP, None)
    both = RolloutBatch.concat([a, plain], tok.pad_token_id)
    assert both.forced.shape == both.completion_ids.shape and not both.forced[2].any()  # filled for the plain batch
    assert int(both.loss_mask.sum()) == int(a.loss_mask.sum()) + int(plain.completion_mask.sum())
    assert torch.equal(both.select(torch.tensor([1])).forced[:, : a.forced.shape[1]], a.forced[1:])
    assert both.env_reward.tolist() == [0.0, 0.0, 0.0]  # filled for the plain batch too
