"""env=verifiers with tools: the client reads `<tool_call>` JSON out of the policy's text into OpenAI tool calls,
so a `vf.ToolEnv` (examples/envs/calculator_vf.py) runs its tool, and the tool's result enters the episode as
template tokens between the replies (`forced`, outside the loss). On the tiny model, its tokenizer given '{'
and '}' (tests/envs/forced_tools.py), with the tool call scripted (a random tiny model never writes one)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

pytest.importorskip("verifiers", reason="verifiers is not installed (the envs extra: pip install -e '.[envs]')")

from rlx.envs.driver import Budget  # noqa: E402
from rlx.envs.ecosystem import tool_calls  # noqa: E402
from rlx.envs.ecosystem.vf_engine import VerifiersEngine  # noqa: E402
from rlx.envs.ecosystem.vf_load import load, render, rows  # noqa: E402
from rlx.models.forward import token_logprobs  # noqa: E402
from rlx.rollout import SamplingParams  # noqa: E402
from tests.envs.forced_tools import ForceToolCall, braces, tool_call_text, tool_policy_engine  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CALC = str(ROOT / "examples" / "envs" / "calculator_vf.py")
CHATML_TOOLS = str(ROOT / "examples" / "envs" / "chatml_tools.jinja")
ARGS = {"n_train": 6, "n_eval": 2, "steps": 1, "max_operand": 9, "system_prompt": None}
# the tiny model's 128..512 positions: tools listed by name only, tool results as <tool> messages
TEMPLATE = ("{% if tools %}<tools>{% for t in tools %}{{ t['function']['name'] }} {% endfor %}</tools>\n{% endif %}"
            "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}</{{ m['role'] }}>\n{% endfor %}"
            "{% if add_generation_prompt %}<assistant>{% endif %}")
CALL = tool_call_text("calculate", expression="12*3")
FP32_MAX = 2e-3  # per-token |trainer - engine| in fp32 (tests/envs/test_hf.py)


def script(context: str) -> str | None:
    """The first reply of every episode calls the calculator; later replies are the model's own."""
    return None if "<tool>" in context else CALL


def test_tool_calls_are_read_from_json_blocks_only():
    text = 'Let me compute.\n<tool_call>{"name": "calculate", "arguments": {"expression": "2*3"}}</tool_call>'
    assert tool_calls.parse(text) == ("Let me compute.", [("calculate", {"expression": "2*3"})])
    two = '<tool_call>\n{"name": "a", "arguments": {}}\n</tool_call>\n<tool_call>{"name": "b"}'  # last one unclosed
    assert tool_calls.parse(two) == ("", [("a", {}), ("b", {})])
    stringy = '<tool_call>{"name": "a", "arguments": "{\\"x\\": 1}"}</tool_call>'
    assert tool_calls.parse(stringy)[1] == [("a", {"x": 1})]
    for bad in ['<tool_call>{"name": calculate}</tool_call>', '<tool_call>["a"]</tool_call>',
                '<tool_call>{"arguments": {}}</tool_call>', '<tool_call>{"name": "a", "arguments": [1]}</tool_call>',
                '<tool_call>__import__("os").system("x")</tool_call>', "no call at all"]:
        assert tool_calls.parse(bad) == (bad, [])  # plain text: the episode goes on as if no tool was called
    (call,) = tool_calls.openai_calls([("calculate", {"expression": "2*3"})], 4)
    assert call == {"id": "call_4_0", "type": "function",
                    "function": {"name": "calculate", "arguments": '{"expression": "2*3"}'}}
    assert tool_calls.arguments(call) == {"expression": "2*3"}


def test_the_tool_calling_chat_template_renders_calls_and_results():
    """examples/envs/chatml_tools.jinja (model.chat_template by path): the schemas in the system message, a call
    as a <tool_call> block, results as <tool_response> in a user message."""
    from rlx.models.config import chat_template_text
    from rlx.models.tokenizer import build_char_tokenizer

    tok = build_char_tokenizer()
    tok.chat_template = chat_template_text(CHATML_TOOLS)
    env = load(CALC, ARGS)
    call = tool_calls.openai_calls([("calculate", {"expression": "2*3"})], 0)
    messages = [{"role": "user", "content": "Q?"}, {"role": "assistant", "content": "", "tool_calls": call},
                {"role": "tool", "content": "6", "tool_call_id": "call_0_0"}]
    text = render(tok, messages, env.oai_tools)
    assert text.startswith("<|im_start|>system\nYou can call functions.")
    assert json.dumps(env.oai_tools[0]["function"]) in text
    assert ('<|im_start|>assistant\n<tool_call>\n{"name": "calculate", "arguments": {"expression": "2*3"}}\n'
            '</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n6\n</tool_response><|im_end|>\n'
            '<|im_start|>assistant\n') in text


def test_model_chat_template_is_a_template_or_a_file(tmp_path):
    from rlx.models.config import _check_chat_template, chat_template_text

    assert chat_template_text(TEMPLATE) == TEMPLATE
    assert chat_template_text(CHATML_TOOLS) == Path(CHATML_TOOLS).read_text()
    with pytest.raises(ValueError, match="neither a Jinja template .* nor a file"):
        _check_chat_template(str(tmp_path / "missing.jinja"))
    broken = tmp_path / "broken.jinja"
    broken.write_text("{% for m in messages %}{{ m }}")
    with pytest.raises(ValueError, match=r"read from .*broken.jinja\) is not a valid Jinja template"):
        _check_chat_template(str(broken))


@pytest.fixture(scope="module")
def tool_policy(tmp_path_factory):
    """(hf engine, policy, tok): the tiny policy with '{' and '}' in its vocabulary and TEMPLATE as its template."""
    yield from tool_policy_engine(tmp_path_factory.mktemp("vf_tools_policy"), TEMPLATE)


def test_a_tool_call_reaches_the_tool_and_its_result_is_forced_context(tool_policy):
    """One ToolEnv episode per row on the hf engine: the scripted call runs `calculate`, the template's tokens
    around its result are `forced` (and only they), and the trainer's log-probs equal the engine's on the loss."""
    engine, policy, tok = tool_policy
    env = load(CALC, ARGS)
    forcing = ForceToolCall(engine, tok, script)
    vf_engine = VerifiersEngine(forcing, env, tok, Budget(max_turns=3, turn_tokens=90), "calculator")
    prompts = [render(tok, r["prompt"], env.oai_tools) for r in rows(env, "train")][:2]
    batch = vf_engine.generate(prompts, 2, SamplingParams(max_tokens=150), torch.Generator().manual_seed(0))
    assert len(forcing.forced) == 4  # every episode's first reply
    with torch.no_grad():
        trainer = token_logprobs(policy, batch.input_ids, batch.attention_mask, batch.completion_ids.shape[1], 1.0)
    loss = batch.loss_mask.bool()
    assert (trainer - batch.logprobs)[loss].abs().max().item() < FP32_MAX
    for r, ep in enumerate(vf_engine._window):
        assert [t.role for t in ep.turns] == ["policy", "env", "policy"]
        assert tok.decode(ep.turns[0].ids) == CALL + tok.eos_token
        assert tok.decode(ep.turns[1].ids) == "</assistant>\n<tool>36</tool>\n<assistant>"  # the result, forced
        assert int(batch.forced[r].sum()) == len(ep.turns[1].ids)
        assert int(loss[r].sum()) == len(ep.turns[0].ids) + len(ep.turns[2].ids)
        completion = batch.texts[r].state["completion"]
        assert completion[0]["tool_calls"] == tool_calls.openai_calls([("calculate", {"expression": "12*3"})], 0)
        assert completion[1] == {"role": "tool", "content": "36", "tool_call_id": "call_0_0"}
        assert "tool_calls" not in completion[2] and batch.texts[r] == completion[2]["content"]


def test_without_tool_schemas_a_reply_is_text(tool_policy):
    """An environment that gives no tools gets the reply as written, `<tool_call>` and all."""
    engine, _, tok = tool_policy
    env = load(str(Path(__file__).resolve().parent / "vf_arith_env.py"), {"n": 2})
    vf_engine = VerifiersEngine(ForceToolCall(engine, tok, script), env, tok, Budget(max_turns=1), "arith")
    prompts = [render(tok, r["prompt"]) for r in rows(env, "train")]
    batch = vf_engine.generate(prompts, 1, SamplingParams(max_tokens=100), torch.Generator().manual_seed(0))
    for r in range(2):
        assert batch.texts[r] == CALL
        assert "tool_calls" not in batch.texts[r].state["completion"][-1]


@pytest.mark.integration
def test_one_training_step_on_the_tool_environment(tmp_path, monkeypatch):
    """rlx.train end to end on examples/envs/calculator_vf.py (hf, sync): every episode's scripted first reply calls
    the tool (ToolEnv's calculate_calls reads 1), the update's loss is on sampled tokens only, and the trainer's
    log-probs are the engine's."""
    import rlx.train
    from rlx.algo.policy_update import Update
    from rlx.envs.ecosystem.vf_engine import Verifiers
    from tests.conftest import TINY, compose, read_metrics

    cfg = compose(TINY + ["env=verifiers", f"env.id={CALC}", "rollout.max_new_tokens=160", "env.turn_tokens=90",
                          "env.max_turns=3", "model.max_position_embeddings=512", "train.steps=1", "train.eval_every=1",
                          "train.ckpt_every=1", "rollout.eval_k=0", "rollout.prompts_per_step=2",
                          "rollout.group_size=2", "model.sft.steps=5", f"model.cache_dir={tmp_path / 'cache'}"])
    cfg.env.args = ARGS
    cfg.model.chat_template = TEMPLATE
    wrap = Verifiers.wrap
    monkeypatch.setattr(Verifiers, "wrap", staticmethod(lambda c, engine, tok: wrap(c, ForceToolCall(engine, tok, script),
                                                                                      tok)))
    seen, prepare = [], Update.prepare

    def spy(self, batch, rewards, dp):
        seen.append(batch)
        return prepare(self, batch, rewards, dp)

    monkeypatch.setattr(Update, "prepare", spy)
    with braces():  # a cache of its own: this tiny model's vocabulary has '{' and '}'
        assert rlx.train.run(cfg, tmp_path / "run")["status"] == "finished"
    (row,) = [r for r in read_metrics(tmp_path / "run") if r["step"] == 1 and "train/reward/mean" in r]
    assert row["train/rewards/calculate_calls"] == 1.0 and row["train/rewards/total_tool_calls"] == 1.0
    assert "train/rewards/correct_answer" in row
    assert abs(row["rollout/logprob_diff/mean"]) < 1e-3
    (batch,) = seen
    assert batch.forced.any() and not (batch.loss_mask.bool() & batch.forced).any()
