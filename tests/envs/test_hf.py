"""Multi-turn episodes end to end on the hf engine (and vLLM's, where installed) and the tiny LoRA policy:
the trainer scores exactly the tokens the engine sampled, environment tokens are context the trainer
forwards but never loss."""

from __future__ import annotations

import functools

import pytest
import torch
from omegaconf import OmegaConf

from rlx.envs import EnvConfig, env_factory, wrap_engine
from rlx.envs.driver import Budget, run_episodes
from rlx.envs.format import TurnFormat
from rlx.models.forward import token_logprobs
from rlx.rollout import SamplingParams
from tests.envs.helpers import EchoEnv, lazy_engines
from tests.rollout.conftest import engine_params

PROMPTS = ["3+4=", "12-5=", "hello", "(2+3)*4="]
FP32_MEAN, FP32_MAX = 1e-4, 2e-3  # per-token |trainer - engine| in fp32 (tests/rollout/test_conformance.py)


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    """{engine name: (engine, policy, tok)} over one tiny policy, each engine built on first use."""
    yield from lazy_engines(tmp_path_factory.mktemp("tiny_policy"))


@pytest.fixture
def served(engines):
    return engines("hf")


def echo(tok):
    return functools.partial(EchoEnv, EnvConfig(), TurnFormat(tok))


def trainer_logprobs(policy, b):  # [N, T]
    with torch.no_grad():
        return token_logprobs(policy, b.input_ids, b.attention_mask, b.completion_ids.shape[1], 1.0)


def test_an_episode_the_policy_ends_at_once_is_the_engines_own_sample(served):
    """The calculator on a policy that never calls it: each episode is one turn, bit for bit engine.generate's."""
    engine, _, tok = served
    sp = SamplingParams(max_tokens=16)
    seeds = list(range(100, 100 + 2 * len(PROMPTS)))
    plain = engine.generate(PROMPTS, 2, sp, None, seeds=seeds)
    env = wrap_engine(EnvConfig(name="calculator", instructions=""), engine, tok)
    b = env.generate(PROMPTS, 2, sp, None, seeds=seeds)
    for col in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "logprobs", "entropy", "truncated",
                "group", "version", "token_version"):
        assert torch.equal(getattr(b, col), getattr(plain, col)), col
    assert b.texts == plain.texts and not b.forced.any()
    assert env.metrics()["env/turns/mean"] == 1.0


@pytest.mark.parametrize("name", engine_params(["hf", "vllm"]))
def test_multi_turn_logprobs_are_the_trainers_on_the_whole_sequence(engines, name):
    """Every turn continues the token ids as sampled and appended: the trainer's forward of prompt + all
    turns gives the engine's behaviour log-probs on every policy token, including those after replies."""
    engine, policy, tok = engines(name)
    out = run_episodes(engine, echo(tok), PROMPTS, 2, SamplingParams(max_tokens=40), torch.Generator().manual_seed(0),
                       Budget(max_turns=3, turn_tokens=8))
    b = out.batch
    turns = [[t.role for t in ep.turns] for ep in out.episodes]
    assert any(t.count("policy") >= 2 for t in turns)  # replies came, and the policy went on after them
    lm = b.loss_mask.bool()
    after_reply = lm & (b.forced.long().cumsum(1) > 0)  # policy tokens sampled after an environment reply
    assert after_reply.sum() > 10
    d = (trainer_logprobs(policy, b) - b.logprobs).abs()
    assert d[lm].mean() < FP32_MEAN and d[lm].max() < FP32_MAX and d[after_reply].max() < FP32_MAX
    # the replies are context the trainer must forward: without them the later turns' log-probs are others
    blind = b.attention_mask.clone()
    blind[:, b.prompt_ids.shape[1]:][b.forced] = 0
    with torch.no_grad():
        other = token_logprobs(policy, b.input_ids, blind, b.completion_ids.shape[1], 1.0)
    assert (other - b.logprobs).abs()[after_reply].max() > 1e-2
    # counted: environment tokens are forwarded (completion_mask) and excluded from the loss (loss_mask)
    env_tokens = sum(len(t.ids) for ep in out.episodes for t in ep.turns if t.role == "env")
    assert env_tokens == int(b.forced.sum()) > 0
    assert int(b.completion_mask.sum()) - int(b.loss_mask.sum()) == env_tokens
    assert env_tokens == sum(tok.decode(t.ids) == " ok." for ep in out.episodes for t in ep.turns) * len(" ok.")


class DigitStopEcho(EchoEnv):
    """EchoEnv whose policy turns end at a digit (stop strings the tiny random policy writes often)."""

    stop_strings = tuple("0123456789")


class Spy:
    """An engine that records how many tokens each generate call decoded; `blind`: it drops the stop
    strings it is given (an engine decoding on to its budget, cut by the driver alone)."""

    def __init__(self, engine, blind: bool = False):
        self.engine, self.blind, self.decoded = engine, blind, 0
        self.tok = engine.tok

    def generate(self, prompts, n, sampling, generator, seeds=None):
        out = self.engine.generate(prompts, n, sampling.but(stop=()) if self.blind else sampling, generator, seeds)
        self.decoded += int(out.completion_mask.sum())
        return out


@pytest.mark.parametrize("name", engine_params(["hf", "vllm"]))
def test_a_turn_ends_at_its_stop_string_in_the_engine(engines, name):
    """The driver gives the engine the environment's stop strings: a turn ends where it writes one, with no
    token decoded past it, and the episodes are those of an engine that decodes on to the turn's budget
    and is cut by the driver (which stays as the check)."""
    engine, _, tok = engines(name)
    make = functools.partial(DigitStopEcho, EnvConfig(), TurnFormat(tok))
    sp, budget, seeds = SamplingParams(max_tokens=200), Budget(max_turns=3, turn_tokens=8), list(range(8))
    spy, blind = Spy(engine), Spy(engine, blind=True)
    a = run_episodes(spy, make, PROMPTS, 2, sp, None, budget, seeds=seeds)
    b = run_episodes(blind, make, PROMPTS, 2, sp, None, budget, seeds=seeds)
    for x, y in zip(a.episodes, b.episodes):
        assert [t.ids for t in x.turns] == [t.ids for t in y.turns]
        assert [t.logprobs for t in x.turns] == [t.logprobs for t in y.turns]
    turns = [t for ep in a.episodes for t in ep.turns if t.role == "policy"]
    stopped = [t for t in turns if any(d in tok.decode(t.ids) for d in DigitStopEcho.stop_strings)]
    assert len(stopped) >= 3 and all(tok.decode(t.ids)[-1].isdigit() for t in stopped)
    policy_tokens = sum(len(t.ids) for t in turns)
    assert spy.decoded == policy_tokens < blind.decoded  # nothing decoded past a stop string (each turn <= 8 tokens)


def test_an_episode_does_not_depend_on_its_batch(served):
    engine, _, tok = served
    sp, budget = SamplingParams(max_tokens=30), Budget(max_turns=3, turn_tokens=6)
    both = run_episodes(engine, echo(tok), PROMPTS[:2], 1, sp, None, budget, seeds=[7, 8]).episodes
    alone = run_episodes(engine, echo(tok), PROMPTS[1:2], 1, sp, None, budget, seeds=[8]).episodes
    assert [t.ids for t in both[1].turns] == [t.ids for t in alone[0].turns]


def test_the_update_never_trains_on_environment_tokens(served):
    """rlx.algo's Update on a multi-turn batch: its loss mask and token weights are 0 on every reply token,
    and what the batch says at those positions (behaviour log-probs) does not change the update."""
    from rlx.algo import Shaped, Update
    from rlx.config import RLXConfig
    from rlx.run.config import TrainerConfig
    from rlx.run.device import resolve
    from rlx.algo.data_parallel import DataParallel
    from rlx.run.distributed import World

    engine, policy, tok = served
    out = run_episodes(engine, echo(tok), PROMPTS, 2, SamplingParams(max_tokens=30), torch.Generator().manual_seed(1),
                       Budget(max_turns=3, turn_tokens=6))
    b = out.batch
    cfg = OmegaConf.merge(OmegaConf.structured(RLXConfig), {"rollout": {"max_new_tokens": 30},
                                                            "algo": {"loss": "ppo_clip", "aggregation": "token"}})
    trainer = resolve(OmegaConf.structured(TrainerConfig(device="cpu", dtype="fp32")))
    rewards = torch.arange(len(b), dtype=torch.float32) % 3

    def update(batch):
        params = [p for p in policy.parameters() if p.requires_grad]
        saved = [p.detach().clone() for p in params]
        opt = torch.optim.SGD(params, lr=1.0)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
        upd = Update.from_config(cfg, trainer, sched)
        prep = upd.prepare(batch, rewards, DataParallel(policy, World()))
        upd(policy, opt, Shaped(batch, rewards), None, 1)
        delta = [p.detach() - s for p, s in zip(params, saved)]
        with torch.no_grad():
            for p, s in zip(params, saved):
                p.copy_(s)
        return prep, delta

    prep, d0 = update(b)
    assert b.forced.sum() > 0
    assert (prep.mask[b.forced] == 0).all() and (prep.weights[b.forced] == 0).all()
    assert int((prep.mask > 0).sum()) == int(b.completion_mask.sum()) - int(b.forced.sum())
    poked = b.select(torch.arange(len(b)))
    poked.logprobs = b.logprobs.masked_fill(b.forced, -5.0)  # were they in the ratio, the update would change
    _, d1 = update(poked)
    assert any(a.abs().max() > 0 for a in d0)
    for a, c in zip(d0, d1):
        torch.testing.assert_close(a, c, rtol=0, atol=0)
