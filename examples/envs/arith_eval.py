"""An exact arithmetic evaluator for the example environments' calculator tools: numbers, + - * /, signs and
parentheses, parsed with `ast` and walked over a whitelist of node types (Python never evaluates the text);
length, nesting and magnitude bounded. Imported by the examples beside it (their folder is on the path when
rlx loads them by path)."""

from __future__ import annotations

import ast
import operator
from fractions import Fraction

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
        what = type(getattr(node, "op", node)).__name__
        raise ValueError(f"only numbers, + - * / and parentheses are allowed, not {what}")
    if abs(out) >= MAX_ABS:
        raise ValueError("a value is too large")
    return out


def evaluate(expression: str) -> str:
    """The value of `expression`, a whole number or a decimal rounded to 6 places; ValueError names what is wrong."""
    if len(expression) > MAX_CHARS:
        raise ValueError(f"the expression is longer than {MAX_CHARS} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")  # parsed only, never evaluated by Python
    except SyntaxError:
        raise ValueError(f"not an arithmetic expression: {expression!r}") from None
    value = _value(tree.body)
    return str(value.numerator) if value.denominator == 1 else f"{float(value):.6f}".rstrip("0")
