"""env=trl: a TRL-style environment class (reset, public methods as tools, get_reward) on the task group's prompts,
every model call through rlx's client. On the tiny model, its tokenizer given '{' and '}' and its tool calls
scripted (tests/envs/forced_tools.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from rlx.envs.driver import Budget
from rlx.envs.ecosystem import tool_calls
from rlx.envs.ecosystem.trl_env import TrlEngine, load_factory, make_env, tool_methods, tool_schemas
from rlx.envs.ecosystem.trl_task import TrlTask
from rlx.models.forward import token_logprobs
from rlx.rollout import SamplingParams
from tests.envs.forced_tools import ForceToolCall, braces, tool_call_text, tool_policy_engine

ROOT = Path(__file__).resolve().parents[2]
CALC = f"{ROOT / 'examples' / 'envs' / 'calculator_trl.py'}:WordProblemCalculator"
COUNTER = "tests.envs.trl_counter_env:Counter"
TEMPLATE = ("{% if tools %}<tools>{% for t in tools %}{{ t['function']['name'] }} {% endfor %}</tools>\n{% endif %}"
            "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}</{{ m['role'] }}>\n{% endfor %}"
            "{% if add_generation_prompt %}<assistant>{% endif %}")
TASK = ["task=wordproblems", "task.steps=1", "task.max_operand=9", "task.n_train=8", "task.n_eval=2"]
FP32_MAX = 2e-3  # per-token |trainer - engine| in fp32 (tests/envs/test_hf.py)
CALCULATE = {"type": "function", "function": {
    "name": "calculate", "description": "Evaluate an arithmetic expression exactly.",
    "parameters": {"type": "object", "properties": {"expression": {
        "type": "string", "description": 'Numbers with + - * / and parentheses, e.g. "(12 + 3) * 4".'}},
        "required": ["expression"]},
    "return": {"type": "string", "description": "The value, as a whole number or a decimal rounded to 6 places."}}}
SUBMIT = {"type": "function", "function": {
    "name": "submit", "description": "Submit the final answer to the problem (the last submission counts).",
    "parameters": {"type": "object", "properties": {"answer": {
        "type": "string", "description": 'The answer, a number written plainly, e.g. "42".'}}, "required": ["answer"]},
    "return": {"type": "string"}}}


def trl_task(spec: str, tok):
    from tests.conftest import compose

    cfg = compose(TASK)
    task = TrlTask(cfg.task, spec, tool_schemas(make_env(load_factory(spec), spec), spec))
    task.render_chat(tok)
    return task


def test_a_class_loads_by_path_or_module_and_its_public_methods_are_the_tools():
    calc = make_env(load_factory(CALC), CALC)
    assert list(tool_methods(calc)) == ["calculate", "submit"]
    counter = make_env(load_factory(COUNTER), COUNTER)
    assert list(tool_methods(counter)) == ["increment", "peek"]  # not reset, get_reward, _private, a property
    assert load_factory("tests.envs.trl_counter_env.Counter") is load_factory(COUNTER)
    for bad, why in [("no_such_module_anywhere:X", "no importable module"), ("tests.envs.trl_counter_env:Nope",
                     "has no callable 'Nope'"), ("Counter", "give 'pkg.module:Class'")]:
        with pytest.raises(ValueError, match=why):
            load_factory(bad)
    with pytest.raises(ValueError, match="has no reset method"):
        make_env(dict, "builtins:dict")


def test_env_trl_needs_a_factory():
    from rlx.envs import as_config, env_task
    from tests.conftest import compose

    with pytest.raises(ValueError, match="env=trl needs env.factory"):
        as_config(compose(["env=trl"]).env)
    cfg = compose(TASK + ["env=trl", f"env.factory={COUNTER}"])
    assert as_config(cfg.env).factory == COUNTER
    with pytest.raises(ValueError, match="needs the task config"):
        env_task(cfg.env, 0)
    task = env_task(cfg.env, 0, cfg.task)
    assert type(task).__name__ == "TrlTask" and len(task.train) == 8 and task.train[0].messages is not None


def test_tool_schemas_come_from_type_hints_and_docstrings_as_trl_builds_them():
    """The hand-written schemas; and the tools TRL's trainer hands apply_chat_template (the bound methods) render to
    the same JSON as rlx's schemas."""
    from rlx.models.tokenizer import build_char_tokenizer

    calc = make_env(load_factory(CALC), CALC)
    assert tool_schemas(calc, CALC) == [CALCULATE, SUBMIT]
    tok = build_char_tokenizer()
    tok.chat_template = "{{ tools | tojson }}"
    as_trl = tok.apply_chat_template([{"role": "user", "content": "x"}], tools=list(tool_methods(calc).values()),
                                     tokenize=False)
    assert json.loads(as_trl) == tool_schemas(calc, CALC)

    class NoDoc:
        def reset(self, **row):
            return None

        def tool(self, x: int) -> int:
            return x

    with pytest.raises(ValueError, match="tool 'tool' has no JSON schema"):
        tool_schemas(NoDoc(), "here:NoDoc")


def test_an_episode_runs_the_tools_and_reads_the_reward():
    """A scripted policy: increment(2), peek(), increment(-1) (raises), then an answer. The observation reset
    returns ends the user message; each result is one tool message, forced; get_reward() is the env reward."""
    from rlx.models.tokenizer import build_char_tokenizer
    from tests.envs.helpers import ScriptedEngine

    with braces():
        tok = build_char_tokenizer()
    tok.chat_template = TEMPLATE
    task = trl_task(COUNTER, tok)
    replies = [tool_call_text("increment", by=2), tool_call_text("peek"), tool_call_text("increment", by=-1), "done"]
    engine = TrlEngine(ScriptedEngine(tok, lambda ctx, call: replies[call] + "|"), COUNTER, tok, Budget(max_turns=5))
    prompts = [e.prompt for e in task.train[:2]]
    batch = engine.generate(prompts, 1, SamplingParams(max_tokens=400), torch.Generator().manual_seed(0))
    assert batch.env_reward.tolist() == [2.0, 2.0]
    for r, ep in enumerate(engine._window):
        assert tok.decode(ep.prompt_ids).endswith(" Count.</user>\n<assistant>")
        assert [t.role for t in ep.turns] == ["policy", "env"] * 3 + ["policy"]
        results = [tok.decode(t.ids) for t in ep.turns if t.role == "env"]
        assert results == [f"</assistant>\n<tool>{v}</tool>\n<assistant>" for v in
                           ("2", "2", str({"error": "only counts up"}))]
        assert int(batch.forced[r].sum()) == sum(len(t.ids) for t in ep.turns if t.role == "env")
        assert ep.info == {"tool_calls": 3.0, "tool_failures": 1.0} and batch.texts[r] == "done"
        assert ep.turns[0].ids[-1] == tok.eos_token_id
    assert engine.metrics()["env/tool_calls/mean"] == 3.0


def test_an_engine_failure_reaches_every_episode_of_its_wave():
    """The engine raising (here StopIteration, which an asyncio future refuses) stops the call with the error,
    instead of leaving the wave's other episodes waiting."""
    from rlx.models.tokenizer import build_char_tokenizer

    class Failing:
        def generate(self, *args, **kwargs):
            raise StopIteration("no more")

    tok = build_char_tokenizer()
    tok.chat_template = TEMPLATE
    task = trl_task(COUNTER, tok)
    engine = TrlEngine(Failing(), COUNTER, tok, Budget())
    with pytest.raises(RuntimeError, match="StopIteration"):
        engine.generate([e.prompt for e in task.train[:2]], 2, SamplingParams(max_tokens=50),
                        torch.Generator().manual_seed(0))


@pytest.fixture(scope="module")
def tool_policy(tmp_path_factory):
    """(hf engine, policy, tok): the tiny policy with '{' and '}' in its vocabulary and TEMPLATE as its template."""
    yield from tool_policy_engine(tmp_path_factory.mktemp("trl_policy"), TEMPLATE)


def submit_script(task):
    """First reply: calculate 12*3; second: submit the row's answer; later: the model's own."""
    answers = {e.prompt: e.answer for e in [*task.train, *task.eval]}

    def script(context: str) -> str | None:
        if "<tool>" not in context:
            return tool_call_text("calculate", expression="12*3")
        if context.count("<tool>") == 1:
            prompt = next(p for p in answers if context.startswith(p))
            return tool_call_text("submit", answer=answers[prompt])
        return None

    return script


def test_a_forced_tool_call_executes_the_method_and_its_result_is_forced_context(tool_policy):
    """On the hf engine: the scripted calls run the class's methods, their results are the only forced tokens,
    get_reward reads the submission, and the trainer's log-probs equal the engine's on every loss token."""
    engine, policy, tok = tool_policy
    task = trl_task(CALC, tok)
    trl = TrlEngine(ForceToolCall(engine, tok, submit_script(task)), CALC, tok, Budget(max_turns=3, turn_tokens=90))
    batch = trl.generate([e.prompt for e in task.train[:2]], 2, SamplingParams(max_tokens=250),
                         torch.Generator().manual_seed(0))
    assert batch.env_reward.tolist() == [1.0] * 4
    with torch.no_grad():
        trainer = token_logprobs(policy, batch.input_ids, batch.attention_mask, batch.completion_ids.shape[1], 1.0)
    loss = batch.loss_mask.bool()
    assert (trainer - batch.logprobs)[loss].abs().max().item() < FP32_MAX
    for r, ep in enumerate(trl._window):
        assert [t.role for t in ep.turns] == ["policy", "env", "policy", "env", "policy"]
        assert [tok.decode(t.ids) for t in ep.turns if t.role == "env"] == [
            "</assistant>\n<tool>36</tool>\n<assistant>", "</assistant>\n<tool>Submitted.</tool>\n<assistant>"]
        assert int(batch.forced[r].sum()) == len(ep.turns[1].ids) + len(ep.turns[3].ids)
        assert int(loss[r].sum()) == sum(len(t.ids) for t in ep.turns if t.role == "policy")
    assert tool_calls.parse(tok.decode(trl._window[0].turns[0].ids[:-1]))[1] == [("calculate", {"expression": "12*3"})]


@pytest.mark.integration
def test_one_training_step_on_a_trl_environment(tmp_path, monkeypatch):
    """rlx.train end to end (hf, sync) on examples/envs/calculator_trl.py with task=wordproblems: get_reward is the
    env reward (every episode submits the answer), the task's stated_answer is logged beside it, the loss is on
    sampled tokens only and the trainer's log-probs are the engine's."""
    import rlx.train
    from rlx.algo.policy_update import Update
    from rlx.envs.ecosystem.trl_env import Trl
    from tests.conftest import TINY, compose, read_metrics

    cfg = compose(TINY + TASK + ["env=trl", f"env.factory={CALC}", "rollout.max_new_tokens=240", "env.turn_tokens=90",
                                 "env.max_turns=3", "model.max_position_embeddings=512", "train.steps=1",
                                 "train.eval_every=1", "train.ckpt_every=1", "rollout.eval_k=0",
                                 "rollout.prompts_per_step=2", "rollout.group_size=2", "model.sft.steps=5",
                                 f"model.cache_dir={tmp_path / 'cache'}"])
    cfg.model.chat_template = TEMPLATE
    wrap, scripts = Trl.wrap, {}

    def forced(c, engine, tok):
        from rlx.envs.ecosystem.trl_task import _TASKS

        return wrap(c, ForceToolCall(engine, tok, lambda ctx: scripts.setdefault(0, submit_script(_TASKS[CALC]))(ctx)),
                    tok)

    monkeypatch.setattr(Trl, "wrap", staticmethod(forced))
    seen, prepare = [], Update.prepare

    def spy(self, batch, rewards, dp):
        seen.append(batch)
        return prepare(self, batch, rewards, dp)

    monkeypatch.setattr(Update, "prepare", spy)
    with braces():  # a cache of its own: this tiny model's vocabulary has '{' and '}'
        assert rlx.train.run(cfg, tmp_path / "run")["status"] == "finished"
    (row,) = [r for r in read_metrics(tmp_path / "run") if r["step"] == 1 and "train/reward/mean" in r]
    assert row["train/env_reward/mean"] == 1.0 and row["env/tool_calls/mean"] == 2.0
    assert "train/rewards/stated_answer" in row
    assert abs(row["rollout/logprob_diff/mean"]) < 1e-3
    (batch,) = seen
    assert batch.forced.any() and not (batch.loss_mask.bool() & batch.forced).any()


def test_the_context_check_counts_the_tool_schemas_the_template_renders():
    """check_fits renders each prompt as the engine will see it, tools included: the longest prompt it names is the
    template's rendering with the class's tools, longer than without them."""
    import re

    from rlx.config.limits import check_fits
    from rlx.envs import env_task
    from rlx.models.tokenizer import build_char_tokenizer
    from tests.conftest import TINY, compose

    cfg = compose(TINY + TASK + ["env=trl", f"env.factory={CALC}", "model.max_position_embeddings=64"])
    cfg.model.chat_template = TEMPLATE
    task = env_task(cfg.env, 0, cfg.task)
    tok = build_char_tokenizer()
    tok.chat_template = TEMPLATE

    def longest(tools):
        return max(len(tok(tok.apply_chat_template(e.messages, tools=tools, add_generation_prompt=True, tokenize=False),
                           add_special_tokens=False).input_ids) for e in task.train + task.eval)

    with pytest.raises(ValueError, match=r"longest prompt \((\d+) tokens\)") as err:
        check_fits(cfg, task)
    named = int(re.search(r"longest prompt \((\d+) tokens\)", str(err.value)).group(1))
    assert task.tools == [CALCULATE, SUBMIT] and named == longest(task.tools) > longest(None)
