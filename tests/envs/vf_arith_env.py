"""A verifiers environment for the tests (loaded by path, never imported by name): short arithmetic prompts that
the tiny model's 128-token context holds, as a single-turn environment, a follow-up that asks again after
every reply (multi-turn: the template's tokens and the user's message between calls), and one that rewrites
the conversation (rlx refuses it)."""

from __future__ import annotations

import verifiers as vf
from datasets import Dataset

PROBLEMS = [("3+4=", "7"), ("12-5=", "7"), ("2*3=", "6"), ("9-1=", "8"), ("(2+3)*4=", "20"), ("8/2=", "4"),
            ("5+5=", "10"), ("7-3=", "4"), ("6*2=", "12"), ("1+8=", "9"), ("4*4=", "16"), ("9/3=", "3")]
AGAIN = "Again?"


def exact(completion, answer, parser, **kwargs) -> float:
    return 1.0 if (parser.parse_answer(completion) or "").strip() == answer else 0.0


def replies(state, **kwargs) -> float:
    """How many replies the model wrote (a metric, weight 0)."""
    return float(len(state["trajectory"]))


async def asks_per_group(states, **kwargs) -> list[float]:
    """A group reward function (weight 0): its group's size, so a test sees groups scored together."""
    return [float(len(states))] * len(states)


class FollowUp(vf.MultiTurnEnv):
    """After every reply the user asks again, until max_turns."""

    async def env_response(self, messages, state, **kwargs):
        return [{"role": "user", "content": AGAIN}]


class Rewriter(FollowUp):
    """The second call's conversation leaves out the first reply: not one token sequence."""

    async def get_prompt_messages(self, state):
        if not state["trajectory"]:
            return state["prompt"]
        return [*state["prompt"], {"role": "user", "content": AGAIN}]


def load_environment(kind: str = "single", n: int = 8, max_turns: int = 3, eval_n: int = 0) -> vf.Environment:
    rows = [{"question": q, "answer": a} for q, a in PROBLEMS]
    parser = vf.Parser()
    rubric = vf.Rubric(funcs=[exact, replies, asks_per_group], weights=[1.0, 0.0, 0.0], parser=parser)
    kwargs = {"eval_dataset": Dataset.from_list(rows[n: n + eval_n])} if eval_n else {}
    if kind != "single":
        kwargs["max_turns"] = max_turns
    cls = {"single": vf.SingleTurnEnv, "followup": FollowUp, "rewrite": Rewriter}[kind]
    return cls(dataset=Dataset.from_list(rows[:n]), parser=parser, rubric=rubric, **kwargs)
