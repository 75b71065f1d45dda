"""Word problems with a calculator tool, written as a verifiers user writes a tool environment (verifiers
0.1.10's classic API): a `load_environment` that returns a `vf.ToolEnv` whose tool is a plain Python function.

    python -m rlx.train env=verifiers env.id=examples/envs/calculator_vf.py 'env.args={n_train: 2000}' \\
        model.chat_template=examples/envs/chatml_tools.jinja env.max_turns=4

The model calls the tool by writing `<tool_call>{"name": "calculate", "arguments": {"expression": "3*4"}}
</tool_call>` (the Hermes/Qwen convention that the chat template above teaches it and rlx's client reads);
the environment runs `calculate` and answers with its result, and the episode goes on until the model
replies without a tool call (or a budget ends it). The problems are rlx's generated word problems
(rlx.tasks.wordproblems.make_problem); the calculator, the rows, the parser and the rubric are this file's own.
ToolEnv adds its own metrics (total_tool_calls, calculate_calls: weight 0).
"""

from __future__ import annotations

import ast
import operator
import random
import re
from fractions import Fraction

import verifiers as vf
from datasets import Dataset

from rlx.tasks.wordproblems import make_problem

SYSTEM = ("Solve the problem. You may call the calculate tool for arithmetic. "
          "End your final reply with '#### N', N the answer.")
_STATED = re.compile(r"####\s*(-?\d[\d,]*(?:\.\d+)?)")
_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
MAX_CHARS, MAX_DEPTH, MAX_ABS = 200, 32, 10**15


def _value(node: ast.AST, depth: int = 0) -> Fraction:
    """An arithmetic expression tree's exact value: numbers, + - * /, signs and parentheses only."""
    if depth > MAX_DEPTH:
        raise ValueError("the expression is nested too deeply")
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        out = Fraction(str(node.value))  # a decimal as written (0.1 is 1/10)
    elif isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _value(node.left, depth + 1), _value(node.right, depth + 1)
        if isinstance(node.op, ast.Div) and right == 0:
            raise ValueError("division by zero")
        out = _BINARY[type(node.op)](left, right)
    elif isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        out = _UNARY[type(node.op)](_value(node.operand, depth + 1))
    else:
        raise ValueError(f"only numbers, + - * / and parentheses are allowed, not {type(getattr(node, 'op', node)).__name__}")
    if abs(out) >= MAX_ABS:
        raise ValueError("a value is too large")
    return out


def calculate(expression: str) -> str:
    """Evaluate an arithmetic expression exactly.

    Args:
        expression: Numbers with + - * / and parentheses, e.g. "(12 + 3) * 4".

    Returns:
        The value, as a whole number or a decimal rounded to 6 places.
    """
    if len(expression) > MAX_CHARS:
        raise ValueError(f"the expression is longer than {MAX_CHARS} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")  # parsed only, never evaluated by Python
    except SyntaxError:
        raise ValueError(f"not an arithmetic expression: {expression!r}") from None
    value = _value(tree.body)
    return str(value.numerator) if value.denominator == 1 else f"{float(value):.6f}".rstrip("0")


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
