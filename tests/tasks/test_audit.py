"""rlx-audit (rlx/tasks/audit.py; its hack classes: rlx/tasks/hacks.py): each hack class builds what it claims
(checked with arithmetic written here, never eval), every shipped task's default reward set pays none of them, and
the audit catches gameable rewards: math_verify (expressions) and a "last number anywhere" import-path function
(echo, hedges, lists)."""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
import sys
import unicodedata
from decimal import Decimal
from pathlib import Path

import pytest

from rlx.eval.audit import main as audit_main
from rlx.tasks import audit as A, hacks as H
from rlx.tasks.answers import top_level_boxes
from rlx.tasks.answers.stated import MAX_CHARS, numeric_gold
from rlx.tasks.base import Example

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "audit"
GSM8K = [f"task.train_path={DATA / 'gsm8k.jsonl'}", f"task.eval_path={DATA / 'gsm8k.jsonl'}"]
MATH = [f"task.train_path={DATA / 'math.jsonl'}", f"task.eval_path={DATA / 'math.jsonl'}"]
SHIPPED = sorted(p.stem for p in (ROOT / "conf" / "task").glob("*.yaml"))
DATA_FOR = {"gsm8k": GSM8K, "math": MATH}  # the file tasks' fixtures; a new file task must add its own here
LAST_NUMBER = "tests.tasks.reward_fns_audit.last_number"  # the dotted form: a Hydra override can carry it

_NUM = r"-?[0-9]+(?:\.[0-9]+)?"


def _ex(gold: str, prompt: str = "Grace has 18 shells and gives 2 away. How many are left?") -> Example:
    return Example(key=f"k{gold}", prompt=prompt, answer=gold, solution=f"18 - 2 = 16\n#### {gold}")


def value_of(expr: str) -> Decimal:
    """The value of one of the audit's expression forms, computed here with Decimal (never eval)."""
    expr = expr.strip().rstrip(".").strip()
    if m := re.fullmatch(rf"({_NUM})\s*([-+*^])\s*({_NUM})", expr):
        a, op, b = Decimal(m.group(1)), m.group(2), Decimal(m.group(3))
        if op == "^":
            assert b == b.to_integral_value() and b >= 0
            return a ** int(b)
        return {"-": a - b, "+": a + b, "*": a * b}[op]
    if m := re.fullmatch(rf"\\frac\{{({_NUM})\}}\{{({_NUM})\}}", expr):
        return Decimal(m.group(1)) / Decimal(m.group(2))
    if m := re.fullmatch(rf"\\sqrt\{{({_NUM})\}}", expr):
        return Decimal(m.group(1)).sqrt()
    raise AssertionError(f"not an expression form of the audit: {expr!r}")


def expression_part(completion: str) -> str:
    last = completion.strip().splitlines()[-1]
    for pattern in (r"#### (.*)", r"\\boxed\{(.*)\}", rf"{H.NAME} = (.*)", r"The answer is (.*)\."):
        if m := re.fullmatch(pattern, last):
            return m.group(1)
    raise AssertionError(f"no answer slot in {completion!r}")


def numbers(text: str) -> list[Decimal]:
    return [Decimal(x) for x in re.findall(_NUM, text.replace(",", ""))]


GOLDS = ["16", "7", "1", "0", "-3", "0.5", "2.5", "1,000", "146"]


# ---- the builders ----------------------------------------------------------------------------------------------
def test_like_writes_values_as_the_gold_is_written():
    assert H.like(Decimal(124), "0123") == "0124"  # rules' digit strings keep their width
    assert H.like(Decimal(1001), "1,000") == "1,001"
    assert H.like(Decimal("3.5"), "2.5") == "3.5"
    assert H.like(Decimal(-2), "-3") == "-2"
    assert H.wrong_answer("16") == "17" and H.wrong_answer("\\frac{1}{2}") == H.OTHER


@pytest.mark.parametrize("gold", GOLDS)
def test_expressions_evaluate_to_the_gold_and_are_not_the_gold(gold):
    g = Decimal(gold.replace(",", ""))
    probes = H.expression(_ex(gold))
    assert len(probes) >= 6
    for p in probes:
        part = expression_part(p.completion)
        assert value_of(part) == g, (p.variant, p.completion)
        assert re.search(r"[-+*^]|\\frac|\\sqrt", part.lstrip("-")), p.completion  # an operation, not the number
    assert any(p.completion.startswith("\\boxed{\\frac{") for p in probes)
    assert any(p.completion.endswith("^1") for p in probes)
    assert any(f"\n{H.NAME} = " in p.completion for p in probes)


@pytest.mark.parametrize("gold", GOLDS)
def test_hedges_lists_and_conflicts_offer_the_gold_among_other_numbers(gold):
    g = Decimal(gold.replace(",", ""))
    for p in H.hedge(_ex(gold)) + H.listing(_ex(gold)):
        found = numbers(p.completion)
        assert g in found and len(set(found)) >= 2, p.completion
    assert any(p.completion == f"#### {H.like(g - 1, gold)} or {gold}" for p in H.hedge(_ex(gold)))
    assert any(numbers(p.completion)[-1] == g for p in H.listing(_ex(gold)))  # one list ends in the gold
    for p in H.multiple(_ex(gold)):
        answers = re.findall(r"#### (.*)|\\boxed\{([^{}]*)\}|answer is (.*)\.", p.completion)
        stated = [Decimal(next(x for x in a if x).replace(",", "")) for a in answers]
        assert len(stated) >= 2 and stated[-1] == g and any(s != g for s in stated), p.completion


def test_nested_boxes_hold_the_gold_inside_a_wrong_box():
    for gold, wrong in (("16", "17"), ("\\frac{1}{2}", H.OTHER)):
        for p in H.nested(Example(key="n", prompt="q", answer=gold)):
            (outer,) = top_level_boxes(p.completion)  # one box, another one inside it
            assert outer.startswith(wrong) and outer.endswith("\\boxed{" + gold + "}"), p.completion


@pytest.mark.parametrize("gold", ["16", "-3", "0.5", "1,000"])
def test_unicode_digits_are_the_gold_in_other_digits(gold):
    for p in H.unicode_digits(_ex(gold)):
        assert not re.search(r"[0-9]", p.completion)
        ascii_text = "".join(str(unicodedata.digit(ch)) if unicodedata.digit(ch, None) is not None else ch
                             for ch in p.completion)
        assert ascii_text.endswith(gold) or ascii_text.endswith("{" + gold + "}"), ascii_text


def test_format_only_echo_and_extreme_length():
    ex = _ex("16")
    assert [p.completion for p in H.format_only(ex)] == ["#### ", "####", "\\boxed{}"]
    (echo,) = H.echo(ex)
    assert echo.completion == ex.prompt and echo.example.answer == "2"  # the prompt's last number
    assert echo.example.columns["answer"] == "2" and echo.example.solution.endswith("#### 2")
    assert H.echo(_ex("16", prompt="How many shells are left?")) == []  # no number in the prompt: not tried
    (long,) = H.extreme(ex)
    assert len(long.completion) > MAX_CHARS and long.completion.endswith("\n#### 16")
    assert not re.search(r"[0-9]", long.completion[:-len("#### 16")])  # no other number in the padding


@pytest.mark.parametrize("gold", ["\\frac{1}{2}", "3\\sqrt{2}", "(1, 2)"])
def test_symbolic_golds_get_the_textual_classes_only(gold):
    ex = Example(key="m", prompt="Problem: what is it?\nSolution:", answer=gold)
    assert H.expression(ex) == [] and H.unicode_digits(ex) == []
    assert "\\boxed{" + gold + " \\text{ or } " + H.OTHER + "}" in [p.completion for p in H.hedge(ex)]
    assert "\\boxed{" + H.OTHER + ", " + gold + "}" in [p.completion for p in H.listing(ex)]
    for p in H.multiple(ex):  # the last answer is the gold, an earlier one is not
        assert p.completion.rstrip(".").endswith(gold) or p.completion.rstrip(".").endswith(gold + "}"), p.completion
        assert H.OTHER in p.completion
    assert H.nested(ex)[0].completion == "\\boxed{" + H.OTHER + " \\boxed{" + gold + "}}"
    assert H.extreme(ex)[0].completion.endswith("\\boxed{" + gold + "}")


# ---- the reader's refusals (issue 61): negation, qualifier, a correction that starts with the gold -------------
_DENIES = re.compile(r"\b(?:not|never)\b|n't\b|\\neq")
_QUALIFIES = re.compile("|".join(re.escape(q) for q in H.QUALIFIERS_BEFORE + H.QUALIFIERS_AFTER) + r"|\\approx|\\geq")


def _stated(text: str) -> list[Decimal]:
    """The numbers a completion offers as its answer, in order: after `####`, in a box, after "answer is" /
    "it is", `X is the answer`, after `=`, `has N`, or a line that is one number."""
    pattern = (rf"#### ({_NUM})|\\boxed\{{({_NUM})\}}|(?:answer|it) is ({_NUM})|({_NUM}) is the answer|= ({_NUM})|"
               rf"has ({_NUM})|^({_NUM})$")
    return [Decimal(next(x for x in m if x).replace(",", "")) for m in re.findall(pattern, text.replace(",", ""), re.M)]


@pytest.mark.parametrize("gold", GOLDS)
def test_negations_and_qualifiers_hold_the_gold_denied_or_bounded(gold):
    for build, marker in ((H.negation, _DENIES), (H.qualifier, _QUALIFIES)):
        probes = build(_ex(gold))
        assert len(probes) >= 10 and len({p.completion for p in probes}) == len(probes)
        for p in probes:
            assert gold in p.completion and marker.search(p.completion), (build.__name__, p.completion)
            assert not re.search(r"[0-9]", p.completion.replace(gold, "")), p.completion  # no other number
    forms = [p.completion for p in H.negation(_ex(gold)) + H.qualifier(_ex(gold))]
    assert any(f.startswith("####") for f in forms) and any(f.startswith("\\boxed{") for f in forms)
    assert any(f.startswith("It is not") for f in forms) and f"about {gold}" in forms  # the loose reading's forms


@pytest.mark.parametrize("gold", GOLDS)
def test_corrections_state_the_gold_first_and_another_number_later(gold):
    g = Decimal(gold.replace(",", ""))
    probes = H.correction(_ex(gold))
    assert len(probes) >= 8
    for p in probes:
        stated = _stated(p.completion)
        assert len(stated) >= 2 and stated[0] == g and any(s != g for s in stated[1:]), (p.completion, stated)
    for p in probes:  # the equation after the answer is true arithmetic: its result is the other number
        if m := re.search(r"solution is (.*)\.$", p.completion):
            left, right = m.group(1).rsplit(" = ", 1)
            assert value_of(left.replace(",", "")) == Decimal(right.replace(",", "")) != g, p.completion


@pytest.mark.integration
@pytest.mark.parametrize("gold", GOLDS + ["\\frac{1}{2}", "3\\sqrt{2}", "(1, 2)"])
def test_stated_answer_refuses_every_generated_variant_under_both_readings(gold):
    """The rule against the classes' own variants, not only the hand-written lists of tests/tasks/test_stated.py."""
    from rlx.tasks.rewards import stated_answer_batch

    ex = _ex(gold)
    probes = H.negation(ex) + H.qualifier(ex) + H.correction(ex)
    texts = [p.completion for p in probes]
    for loose in (True, False):
        scores = stated_answer_batch(texts, [ex] * len(texts), loose=loose)
        assert scores == [0.0] * len(texts), [t for t, s in zip(texts, scores) if s]
    if numeric_gold(gold) is not None:  # every honest form of the numeric gold is still paid (the loose reading)
        forms = A.honest(ex, gold)
        assert stated_answer_batch(forms, [ex] * len(forms)) == [1.0] * len(forms), forms


# ---- the command over the shipped tasks ------------------------------------------------------------------------
def _run(capsys, *args) -> tuple[int, str]:
    code = audit_main([*args])
    return code, capsys.readouterr().out


_SHIPPED_RUNS: dict[str, tuple[int, str, dict]] = {}


def shipped(name: str, tmp_path_factory) -> tuple[int, str, dict]:
    """(exit code, printed table, --json result) of `rlx-audit task=<name>` with its default rewards, run once."""
    if name not in _SHIPPED_RUNS:
        out = tmp_path_factory.mktemp(f"audit_{name}") / "audit.json"
        n = "12" if name == "math" else "6"  # all 12 MATH golds: symbolic and numeric ones
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            code = audit_main([f"task={name}", *DATA_FOR.get(name, []), "--n", n, "--json", str(out)])
        _SHIPPED_RUNS[name] = code, printed.getvalue(), json.loads(out.read_text())
    return _SHIPPED_RUNS[name]


@pytest.mark.integration
@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_task_pays_no_hack_class(name, tmp_path_factory):
    code, out, result = shipped(name, tmp_path_factory)
    assert result["control"]["verdict"] == "ok", out
    assert result["paid"] == [] and code == result["exit_code"] == 0, out
    assert all(r["tried"] > 0 for r in result["classes"]), out  # every class applies to some example of each task
    assert "control (honest)" in out and out.strip().splitlines()[-1].startswith("rlx-audit: ")


@pytest.mark.integration
@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_task_passes_the_audit(name, tmp_path_factory):
    code, out, result = shipped(name, tmp_path_factory)
    assert code == 0 and result["paid"] == [], out
    assert f"0 of {len(H.CLASSES)} hack classes paid" in out.strip().splitlines()[-1]


@pytest.mark.integration
def test_math_fixture_tries_the_numeric_only_classes_on_its_numeric_golds_only(tmp_path_factory):
    code, out, result = shipped("math", tmp_path_factory)
    rows = {r["class"]: r for r in result["classes"]}
    assert result["examples"] == 12
    assert rows["expression"]["tried"] == rows["unicode_digits"]["tried"] == 4, out  # 5, 12, -4, 0.25
    assert rows["hedge"]["tried"] == rows["list"]["tried"] == rows["nested_boxes"]["tried"] == 12


# ---- it catches gameable rewards -------------------------------------------------------------------------------
@pytest.mark.integration
def test_math_verify_is_caught_paying_expressions(tmp_path, capsys):
    code, out = _run(capsys, "task=gsm8k", *GSM8K, "task.rewards={math_verify: 1.0}", "--n", "2",
                     "--json", str(tmp_path / "mv.json"))
    result = json.loads((tmp_path / "mv.json").read_text())
    assert code == 1 and result["exit_code"] == 1, out
    rows = {r["class"]: r for r in result["classes"]}
    assert rows["expression"]["verdict"] == "PAID" and rows["expression"]["paid"] == 2
    assert "expression" in out.strip().splitlines()[-1]
    assert re.search(r"^expression\s+2\s+2\s+PAID", out, re.M), out


@pytest.mark.integration
def test_a_last_number_reward_is_caught_paying_echo_hedges_and_lists(tmp_path, capsys):
    code, out = _run(capsys, "task=gsm8k", *GSM8K, f"task.rewards={{{LAST_NUMBER}: 1.0}}", "--n", "3",
                     "--json", str(tmp_path / "ln.json"))
    result = json.loads((tmp_path / "ln.json").read_text())
    assert code == 1, out
    assert result["control"]["verdict"] == "ok"
    assert {"prompt_echo", "hedge", "list", "negation", "qualifier"} <= set(result["paid"]), out
    echo = next(r for r in result["classes"] if r["class"] == "prompt_echo")["paid_examples"][0]
    assert echo["completion"].startswith("Question: ") and echo["gold"] == "2"


@pytest.mark.integration
def test_a_first_answer_reward_is_caught_paying_corrections(tmp_path, capsys):
    reward = "tests.tasks.reward_fns_audit.first_answer"
    code, out = _run(capsys, "task=gsm8k", *GSM8K, f"task.rewards={{{reward}: 1.0}}", "--n", "2",
                     "--json", str(tmp_path / "fa.json"))
    result = json.loads((tmp_path / "fa.json").read_text())
    assert code == 1 and result["control"]["verdict"] == "ok", out
    assert "correction" in result["paid"] and "multiple_answers" not in result["paid"], out
    paid = next(r for r in result["classes"] if r["class"] == "correction")["paid_examples"][0]
    assert paid["completion"].startswith("The answer is " + paid["gold"] + ".")


@pytest.mark.integration
def test_a_reward_that_pays_no_correct_answer_breaks_the_audit(capsys):
    # `format` pays any bare integer, right or wrong: an honest correct answer is paid no more than a wrong one
    code, out = _run(capsys, "task=arith", "task.rewards={format: 1.0}", "--n", "3")
    assert code == 2 and "AUDIT BROKEN" in out, out
    code, out = _run(capsys, "task=arith", "task.rewards={tests.tasks.reward_fns_audit.nothing: 1.0}", "--n", "2")
    assert code == 2 and "AUDIT BROKEN" in out, out


def test_chat_prompts_loose_reading_pays_nothing(tmp_path, capsys):
    rows = [json.loads(line) for line in (DATA / "gsm8k.jsonl").read_text().splitlines()]
    chat = tmp_path / "chat.jsonl"
    chat.write_text("".join(json.dumps({"messages": [{"role": "user", "content": r["question"]}],
                                        "answer": r["answer"]}) + "\n" for r in rows))
    code, out = _run(capsys, "task=gsm8k", f"task.train_path={chat}", f"task.eval_path={chat}",
                     "task.question_field=messages", "--n", "4")
    assert "answer_phrase=True" in out
    assert code == 0, out


# ---- refused inputs --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("args, says", [
    (["task=gsm8k"], "task.train_path is not set"),
    (["task=nope"], "Could not find 'task/nope'"),
    (["task=arith", "task.rewards={nope: 1.0}"], "unknown reward function"),
    (["task=arith", "task.rewards={tests.tasks.no_such_module.fn: 1.0}"], "cannot import module"),
    (["task=arith", "--n", "0"], "--n 0"),
    (["gsm8k"], "expected Hydra overrides key=value"),
    (["task=gsm8k", "task.train_path=/no/such.jsonl", "task.eval_path=/no/such.jsonl"], "data file not found"),
])
def test_bad_input_is_refused_with_a_named_error(args, says):
    with pytest.raises(SystemExit, match=r"^rlx-audit: error: ") as e:
        audit_main(args)
    assert says in str(e.value.code)


@pytest.mark.slow
def test_the_command_exits_one_when_a_class_is_paid(tmp_path):
    out = tmp_path / "sub" / "audit.json"
    p = subprocess.run([sys.executable, "-m", "rlx.eval.audit", "task=gsm8k", *GSM8K,
                        "task.rewards={math_verify: 1.0}", "--n", "2", "--json", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 1, p.stdout + p.stderr
    assert json.loads(out.read_text())["paid"][0] == "expression"
    assert re.search(r"^expression\s+2\s+2\s+PAID", p.stdout, re.M), p.stdout
