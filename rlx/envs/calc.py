"""The calculator tool's arithmetic: a small parser of + - * / ^ (or **), parentheses and decimal numbers,
with exact rational values (fractions.Fraction). Model output is parsed here, never evaluated as code.

Grammar (the usual precedence; ^ binds tighter than a sign and is right-associative, so -2^2 = -4 and
2^3^2 = 2^9):

    expr   := term (("+" | "-") term)*
    term   := unary (("*" | "/") unary)*
    unary  := ("+" | "-") unary | power
    power  := atom ("^" unary)?
    atom   := number | "(" expr ")"
    number := 123 | 1,234 (whole groups of three) | 1.5 | .5

`×` and `÷` are read as * and /, `**` as ^. Hard limits (rlx.envs.config.CalculatorConfig), each an
error the policy reads instead of a value: the expression's length (`max_chars`, refused before it is
read), the nesting of parentheses, signs and powers (`max_depth`, which also bounds the recursion),
the size of every intermediate value and of its denominator (`max_digits`), and powers: the exponent
must be a whole number with |e| <= `max_exponent`, and a power whose result would break `max_digits`
is refused from a logarithm before it is computed. Division by zero is refused.

Why no worker process (rlx.tasks.workers bounds math-verify with one): math-verify runs sympy, which
can hang inside C on a short input (`9^9^9^9`). Here nothing can: the input is at most `max_chars`
characters, each read once; the recursion is at most `max_depth` deep; every number an operation
returns is checked against 10^max_digits before the next one uses it, so no operation ever sees an
integer of more than about 3 * max_digits digits; and the one operation that could build a huge number
(a power) is refused before it runs. Its worst case is a few hundred small-integer operations
(tests/envs/test_calc.py times the worst inputs).
"""

from __future__ import annotations

import math
from decimal import ROUND_HALF_EVEN, Context, Decimal
from fractions import Fraction

from rlx.envs.config import CalculatorConfig


class CalcError(ValueError):
    """An expression the calculator refuses; str(e) is the short reason the policy reads."""


_ALIASES = {"×": "*", "÷": "/"}
_OPS = set("+-*/^()")


def _tokens(text: str, cfg: CalculatorConfig) -> list:
    """Numbers (Fraction) and operator characters, left to right."""
    out: list = []
    i, n = 0, len(text)
    while i < n:
        c = _ALIASES.get(text[i], text[i])
        if c.isspace():
            i += 1
        elif c == "*" and i + 1 < n and text[i + 1] == "*":
            out.append("^")
            i += 2
        elif c in _OPS:
            out.append(c)
            i += 1
        elif c in "0123456789.":
            j = i
            while j < n and (text[j] in "0123456789,."):
                j += 1
            out.append(_number(text[i:j], cfg))
            i = j
        else:
            raise CalcError(f"unexpected character {c!r}")
    return out


def _number(s: str, cfg: CalculatorConfig) -> Fraction:
    whole, dot, frac = s.partition(".")
    if "." in frac or (not whole and not frac) or (dot and not frac):
        raise CalcError(f"bad number {s!r}")
    if "," in whole:
        groups = whole.split(",")
        if not (1 <= len(groups[0]) <= 3 and all(len(g) == 3 for g in groups[1:])) or "," in frac:
            raise CalcError(f"bad number {s!r}")
        whole = "".join(groups)
    if "," in frac or len(whole) + len(frac) > 2 * cfg.max_digits:
        raise CalcError(f"bad number {s!r}" if "," in frac else "number too long")
    value = Fraction(int(whole or "0") * 10 ** len(frac) + int(frac or "0"), 10 ** len(frac))
    return _bounded(value, cfg)


def _bounded(v: Fraction, cfg: CalculatorConfig) -> Fraction:
    limit = 10 ** cfg.max_digits
    if abs(v) >= limit or v.denominator >= limit:
        raise CalcError("result too large" if abs(v) >= limit else "result too precise")
    return v


class _Parser:
    def __init__(self, toks: list, cfg: CalculatorConfig):
        self.toks, self.i, self.cfg = toks, 0, cfg

    def peek(self):
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self):
        t = self.peek()
        self.i += 1
        return t

    def deeper(self, depth: int) -> int:
        if depth + 1 > self.cfg.max_depth:
            raise CalcError("too deeply nested")
        return depth + 1

    def expr(self, depth: int) -> Fraction:
        v = self.term(depth)
        while self.peek() in ("+", "-"):
            op = self.take()
            rhs = self.term(depth)
            v = _bounded(v + rhs if op == "+" else v - rhs, self.cfg)
        return v

    def term(self, depth: int) -> Fraction:
        v = self.unary(depth)
        while self.peek() in ("*", "/"):
            op = self.take()
            rhs = self.unary(depth)
            if op == "/" and rhs == 0:
                raise CalcError("division by zero")
            v = _bounded(v * rhs if op == "*" else v / rhs, self.cfg)
        return v

    def unary(self, depth: int) -> Fraction:
        if self.peek() in ("+", "-"):
            op = self.take()
            v = self.unary(self.deeper(depth))
            return -v if op == "-" else v
        return self.power(depth)

    def power(self, depth: int) -> Fraction:
        base = self.atom(depth)
        if self.peek() != "^":
            return base
        self.take()
        return _power(base, self.unary(self.deeper(depth)), self.cfg)

    def atom(self, depth: int) -> Fraction:
        t = self.take()
        if isinstance(t, Fraction):
            return t
        if t == "(":
            v = self.expr(self.deeper(depth))
            if self.take() != ")":
                raise CalcError("missing ')'")
            return v
        raise CalcError("incomplete expression" if t is None else f"unexpected {t!r}")


def _power(base: Fraction, exp: Fraction, cfg: CalculatorConfig) -> Fraction:
    if exp.denominator != 1:
        raise CalcError("exponent must be a whole number")
    e = int(exp)
    if abs(e) > cfg.max_exponent:
        raise CalcError("exponent too large")
    if base == 0:
        if e < 0:
            raise CalcError("division by zero")
        return Fraction(1) if e == 0 else Fraction(0)
    # digits of the result's numerator / denominator, from a logarithm, before anything is computed
    size = max(abs(base.numerator), base.denominator)
    if size > 1 and abs(e) * math.log10(size) > cfg.max_digits + 1:
        raise CalcError("result too large")
    return _bounded(base ** e, cfg)


def evaluate(text: str, cfg: CalculatorConfig | None = None) -> Fraction:
    """The exact value of an arithmetic expression, or CalcError with the reason it is refused."""
    cfg = cfg or CalculatorConfig()
    if len(text) > cfg.max_chars:
        raise CalcError(f"expression too long (over {cfg.max_chars} characters)")
    toks = _tokens(text, cfg)
    if not toks:
        raise CalcError("empty expression")
    p = _Parser(toks, cfg)
    v = p.expr(0)
    if p.peek() is not None:
        raise CalcError(f"unexpected {p.peek()!r}" if not isinstance(p.peek(), Fraction) else "missing operator")
    return v


def format_value(v: Fraction, decimals: int = 6) -> str:
    """A whole number as is (`12`, `-3`); otherwise rounded to `decimals` places, trailing zeros dropped."""
    if v.denominator == 1:
        return str(v.numerator)
    ctx = Context(prec=200)
    d = ctx.divide(Decimal(v.numerator), Decimal(v.denominator)).quantize(Decimal(1).scaleb(-decimals), ROUND_HALF_EVEN,
                                                                          context=ctx)
    s = format(d, "f")
    if "." in s:
        s = s.rstrip("0").rstrip(".")
    return "0" if s in ("-0", "") else s


def calculate(text: str, cfg: CalculatorConfig | None = None) -> str:
    """The calculator's answer text for one expression: its value (format_value), or `error: <reason>`."""
    cfg = cfg or CalculatorConfig()
    try:
        return format_value(evaluate(text, cfg), cfg.decimals)
    except CalcError as e:
        return f"error: {e}"
