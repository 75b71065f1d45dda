"""Environments on token ids: the calculator's step, instructions in the prompt, chat-format replies."""

from __future__ import annotations

import pytest

from rlx.envs import EnvConfig, env_factory
from rlx.envs.calculator import INSTRUCTIONS
from rlx.envs.config import CalculatorConfig
from rlx.envs.format import TurnFormat
from rlx.models.tokenizer import build_char_tokenizer

# a chat template the char tokenizer can write: <role>content</role> per message, then <assistant>
TEMPLATE = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}</{{ m['role'] }}>\n{% endfor %}"
            "{% if add_generation_prompt %}<assistant>{% endif %}")


@pytest.fixture
def tok():
    return build_char_tokenizer()


def calculator(tok, **cfg):
    return env_factory(EnvConfig(name="calculator", **cfg), tok)()


def ids(tok, text):
    return tok(text, add_special_tokens=False).input_ids


def test_step_answers_a_call_with_its_result_as_token_ids(tok):
    env = calculator(tok)
    env.reset(ids(tok, "Q?"))
    step = env.step(ids(tok, "so 18 - 2 is <calc>18-2</calc>"))
    assert step.reply == ids(tok, "<result>16</result>") and not step.done and step.reward == 0
    assert step.info == {"tool_calls": 1, "tool_errors": 0}


def test_step_reads_the_last_call_before_the_closing_tag(tok):
    env = calculator(tok)
    step = env.step(ids(tok, "<calc>1+1 oops <calc>(2+3)*4</calc>"))
    assert tok.decode(step.reply) == "<result>20</result>"


def test_a_turn_without_a_call_ends_the_episode(tok):
    env = calculator(tok)
    for text in ("Grace has 16 apples.\n#### 16", "<calc>3*4", ""):
        step = env.step(ids(tok, text) + [tok.eos_token_id])
        assert step.done and step.reply == [] and step.info == {}


@pytest.mark.parametrize("expr,result", [("1/0", "error: division by zero"), ("9^9^9^9", "error: exponent too large"),
                                         ("3 x 4", "error: unexpected character 'x'")])
def test_refused_expressions_are_answered_with_the_reason(tok, expr, result):
    step = calculator(tok).step(ids(tok, f"<calc>{expr}</calc>"))
    assert tok.decode(step.reply) == f"<result>{result}</result>" and not step.done
    assert step.info == {"tool_calls": 1, "tool_errors": 1}


def test_closing_tag_without_an_opening_one_is_an_error(tok):
    step = calculator(tok).step(ids(tok, "12 </calc>"))
    assert "error" in tok.decode(step.reply) and step.info["tool_errors"] == 1


def test_calculator_limits_come_from_the_config(tok):
    env = calculator(tok, calculator=CalculatorConfig(max_chars=5))
    reply = env.step(ids(tok, "<calc>1+2+3+4</calc>")).reply
    assert tok.decode(reply) == "<result>error: expression too long (over 5 characters)</result>"


def test_reset_puts_the_instructions_after_a_plain_prompt(tok):
    p = ids(tok, "How many? Write #### N.")
    assert calculator(tok).reset(p) == p + ids(tok, "\n" + INSTRUCTIONS)
    assert calculator(tok, instructions="").reset(p) == p
    assert calculator(tok, instructions="Use <calc>.").reset(p) == p + ids(tok, "\nUse <calc>.")


def test_reset_puts_the_instructions_inside_the_user_message_of_a_chat_prompt(tok):
    tok.chat_template = TEMPLATE
    prompt = tok.apply_chat_template([{"role": "user", "content": "How many?"}], add_generation_prompt=True, tokenize=False)
    assert prompt == "<user>How many?</user>\n<assistant>"
    out = calculator(tok, instructions="Use the calculator.").reset(ids(tok, prompt))
    assert tok.decode(out) == "<user>How many?\nUse the calculator.</user>\n<assistant>"


def test_chat_replies_are_messages_of_the_chat_role(tok):
    tok.chat_template = TEMPLATE
    env = calculator(tok, reply_format="chat", chat_role="tool")
    step = env.step(ids(tok, "<calc>6*7</calc>"))
    assert tok.decode(step.reply) == "</assistant>\n<tool><result>42</result></tool>\n<assistant>"
    fmt = TurnFormat(tok, "chat", "user")
    assert tok.decode(fmt.reply("again")) == "</assistant>\n<user>again</user>\n<assistant>"


def test_chat_replies_need_a_chat_template(tok):
    with pytest.raises(ValueError, match="chat template"):
        calculator(tok, reply_format="chat")


@pytest.mark.parametrize("bad,msg", [({"name": "nope"}, "unknown environment"), ({"max_turns": 0}, "max_turns"),
                                     ({"reply_tokens": 0}, "reply_tokens"), ({"reply_format": "xml"}, "reply_format"),
                                     ({"turn_tokens": -1}, "turn_tokens"), ({"chat_role": " "}, "chat_role")])
def test_config_refuses_bad_values(bad, msg):
    with pytest.raises(ValueError, match=msg):
        EnvConfig(**bad)


def test_env_none_builds_nothing(tok):
    from rlx.envs import wrap_engine

    engine = object()
    assert env_factory(EnvConfig(), tok) is None and wrap_engine(EnvConfig(), engine, tok) is engine


def test_the_env_group_composes_and_check_env_reads_other_groups():
    from rlx.envs import as_config, check_env
    from tests.conftest import compose

    assert compose([]).env.name == "none"
    cfg = compose(["env=calculator", "task=wordproblems"])
    assert as_config(cfg.env).name == "calculator"
    check_env(cfg)
    with pytest.raises(ValueError, match="interrupt"):
        check_env(compose(["env=calculator", "rollout.interrupt.enabled=true"]))
    with pytest.raises(ValueError, match="turn_tokens"):
        check_env(compose(["env=calculator", "env.turn_tokens=1000", "rollout.max_new_tokens=100"]))


def test_check_env_counts_the_instructions_in_the_tiny_models_context():
    from rlx.envs import check_env, instruction_tokens
    from rlx.tasks import build_task
    from tests.conftest import compose

    cfg = compose(["env=calculator", "task.n_train=20", "task.n_eval=4"])
    task = build_task(cfg.task)
    assert instruction_tokens(cfg.env, build_char_tokenizer()) == len("\n" + INSTRUCTIONS)
    with pytest.raises(ValueError, match="max_position_embeddings"):
        check_env(cfg, task)  # 169 characters of instructions do not fit the tiny model's context
    check_env(compose(["env=calculator", "env.instructions=''", "task.n_train=20", "task.n_eval=4"]), task)
