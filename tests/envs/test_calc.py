"""The calculator's parser (rlx.envs.calc): hand values, and every refusal the limits promise."""

from __future__ import annotations

import time
from fractions import Fraction

import pytest

from rlx.envs.calc import CalcError, calculate, evaluate, format_value
from rlx.envs.config import CalculatorConfig


@pytest.mark.parametrize("expr,want", [
    ("3*4", "12"), ("18 - 2", "16"), ("(2+3)*4", "20"), ("2+3*4", "14"), ("10-4-3", "3"), ("100/10/5", "2"),
    ("7/2", "3.5"), ("1/3", "0.333333"), ("2/3", "0.666667"), ("0.1+0.2", "0.3"), (".5*4", "2"), ("12.50*2", "25"),
    ("-2^2", "-4"), ("(-2)^2", "4"), ("2^3^2", "512"), ("2**10", "1024"), ("2^-2", "0.25"), ("-(-3)", "3"),
    ("+5", "5"), ("1,234+1", "1235"), ("1,000,000/4", "250000"), ("6 × 7", "42"), ("84 ÷ 2", "42"),
    ("((((1))))", "1"), ("3-5", "-2"), ("0*-1", "0"), ("0^0", "1"), (" 4 ", "4"), ("1.5*1.5", "2.25"),
])
def test_hand_values(expr, want):
    assert calculate(expr) == want


def test_values_are_exact_fractions():
    assert evaluate("1/3+1/3+1/3") == 1
    assert evaluate("0.1*3") == Fraction(3, 10)
    assert format_value(Fraction(-1, 3), 2) == "-0.33" and format_value(Fraction(1, 8), 2) == "0.12"  # half to even


@pytest.mark.parametrize("expr,why", [
    ("1/0", "division by zero"), ("5/(2-2)", "division by zero"), ("0^-1", "division by zero"),
    ("9^9^9^9", "exponent too large"), ("10^60", "result too large"), ("2^64", "result too large"),
    ("2^0.5", "whole number"), ("999999999999999*10", "too large"), ("0.5^60", "too large"),
    ("1/3^40", "too large"), ("3 x 4", "unexpected character"), ("1e5", "unexpected character"),
    ("5%", "unexpected character"), ("__import__('os')", "unexpected character"), ("2+", "incomplete"),
    ("(1+2", "missing ')'"), ("1+2)", "unexpected ')'"), ("1 2", "missing operator"), ("", "empty"),
    ("1.2.3", "bad number"), ("1,23", "bad number"), ("3.", "bad number"), ("*3", "unexpected '*'"),
    ("1" * 40, "number too long"),
])
def test_refusals(expr, why):
    with pytest.raises(CalcError) as e:
        evaluate(expr)
    assert why in str(e.value)
    assert calculate(expr) == f"error: {e.value}"


def test_too_long_is_refused_before_it_is_read():
    cfg = CalculatorConfig(max_chars=20)
    assert evaluate("1+" * 9 + "1", cfg) == 10
    with pytest.raises(CalcError, match="too long"):
        evaluate("1+" * 10 + "1", cfg)  # 21 characters
    with pytest.raises(CalcError, match="too long"):
        evaluate("é" * 21, cfg)  # refused on length, not on the character


def test_too_deep_is_refused():
    cfg = CalculatorConfig(max_depth=4)
    assert evaluate("((((1))))", CalculatorConfig(max_depth=4)) == 1
    for expr in ("(((((1)))))", "-----1", "2^2^2^2^2^2", "-(-(-(-(1))))"):
        with pytest.raises(CalcError, match="too deeply nested"):
            evaluate(expr, cfg)


def test_limits_are_configurable():
    assert calculate("2^64", CalculatorConfig(max_digits=20)) == "18446744073709551616"
    assert calculate("2^10", CalculatorConfig(max_exponent=8)) == "error: exponent too large"
    assert calculate("1/3", CalculatorConfig(decimals=2)) == "0.33"
    with pytest.raises(ValueError, match="env.calculator.max_depth"):
        CalculatorConfig(max_depth=0)


def test_worst_inputs_are_fast():
    """The hostile inputs at the default limits: each refused or answered within milliseconds, in-process."""
    cfg = CalculatorConfig()
    hostile = ["9" * 30 + "^" + "9" * 30, "(" * 200, "-" * 199 + "1", "9^" * 99 + "9", "1/" * 99 + "7",
               "99999999999999*" * 13 + "9", "(1+" * 15 + "1" + ")" * 15, "1.000000000000001^64",
               "123456789012345/" * 12 + "3", "2^64^64"]
    for expr in hostile:
        t0 = time.perf_counter()
        calculate(expr[: cfg.max_chars * 2], cfg)
        assert time.perf_counter() - t0 < 0.05, expr
