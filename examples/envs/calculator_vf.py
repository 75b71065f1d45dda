"""Word problems with a calculator tool, written as a verifiers user writes a tool environment (verifiers
0.1.10's classic API): a `load_environment` that returns a `vf.ToolEnv` whose tool is a plain Python function.

    python -m rlx.train env=verifiers env.id=examples/envs/calculator_vf.py 'env.args={n_train: 2000}' \\
        model.chat_template=examples/envs/chatml_tools.jinja env.max_turns=4

The model calls the tool by writing `<tool_call>{"name": "calculate", "arguments": {"expression": "3*4"}}
</tool_call>` (the Hermes/Qwen convention that the chat template above teaches it and rlx's client reads);
the environment runs `calculate` and answers with its result, and the episode goes on until the model
replies without a tool call (or a budget ends it). The problems are rlx's generated word problems
(rlx.tasks.wordproblems.make_problem); the calculator (arith_eval.py beside this file), the rows, the parser
and the rubric are the example's own.
ToolEnv adds its own metrics (total_tool_calls, calculate_calls: weight 0).
"""

from __future__ import annotations

import random
import re

import verifiers as vf
from datasets import Dataset

from arith_eval import evaluate  # the calculator beside this file (no eval)
from rlx.tasks.wordproblems import make_problem

SYSTEM = ("Solve the problem. You may call the calculate tool for arithmetic. "
          "End your final reply with '#### N', N the answer.")
_STATED = re.compile(r"####\s*(-?\d[\d,]*(?:\.\d+)?)")


def calculate(expression: str) -> str:
    """Evaluate an arithmetic expression exactly.

    Args:
        expression: Numbers with + - * / and parentheses, e.g. "(12 + 3) * 4".

    Returns:
        The value, as a whole number or a decimal rounded to 6 places.
    """
    return evaluate(expression)


def stated_number(text: str) -> str | None:
    """The number of the last '#### N' in `text`, written plainly ('1,200' -> '1200'), or None."""
    found = _STATED.findall(text or "")
    if not found:
        return None
    number = found[-1].replace(",", "")
    return number[:-2] if number.endswith(".0") else number


def correct_answer(completion, answer, parser, **kwargs) -> float:
    """1 when the final reply's last '#### N' states the answer."""
    return 1.0 if parser.parse_answer(completion) == str(answer) else 0.0


def _rows(n: int, steps: int, max_operand: int, seed: int, exclude: set[str]) -> list[dict]:
    rng, rows = random.Random(seed), []
    while len(rows) < n:
        question, record = make_problem(rng, steps, max_operand)
        if question in exclude:
            continue
        exclude.add(question)
        rows.append({"question": question, "answer": record["answer"], "info": {"solution": record["solution"]}})
    return rows


def load_environment(n_train: int = 2000, n_eval: int = 200, steps: int = 2, max_operand: int = 20, seed: int = 0,
                     max_turns: int = 4, system_prompt: str | None = SYSTEM) -> vf.Environment:
    seen: set[str] = set()
    train = _rows(n_train, steps, max_operand, seed, seen)
    held = _rows(n_eval, steps, max_operand, seed + 1, seen)  # never a training question
    parser = vf.Parser(extract_fn=stated_number)
    rubric = vf.Rubric(funcs=[correct_answer], weights=[1.0], parser=parser)
    return vf.ToolEnv(tools=[calculate], max_turns=max_turns, dataset=Dataset.from_list(train),
                      eval_dataset=Dataset.from_list(held), system_prompt=system_prompt, parser=parser, rubric=rubric)
