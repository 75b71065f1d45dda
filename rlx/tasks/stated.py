"""Stated answers: the number a completion states as its final answer, read as text and never evaluated.

A policy rewarded by an equivalence checker learns to hand the checker its arithmetic: `Grace = 18 - 2`
for the gold 16 verifies under math-verify, which evaluates the expression (docs/rewards.md). A GSM8K
reader (lm-eval, a person) sees no answer there. So where the gold is a number, the final answer counts
only when it IS that number, written as a number:

- where it is read (`read_stated`), in this order: the last `####` line (one without any digit is the
  instruction's `#### N` placeholder copied, and is skipped); else the last top-level `\\boxed{}`; else,
  when `loose` (task.answer_phrase, on for chat prompts), the number of the last "the answer is N" /
  "answer: N" / "N is the answer" (after its last `=`: "the answer is 2 + 2 = 4"; phrases that state
  different numbers conflict), else the last number of the last sentence of the final non-empty line
  (a final line that is a question states nothing: an echoed problem);
- what counts as a number (`parse_number`): a sign, `$` (or LaTeX's `\\$`), thousands separators in
  whole groups, a decimal point, a trailing `%`, a trailing unit word or two (`16 shells`), a trailing
  full stop, markdown emphasis around it (`**16**`) and `\\text{}` around the unit; `16.0` is 16;
- what never counts (scores 0): an expression (`18 - 2`, `3*2`, `\\frac{32}{2}`, `4^2`, `sqrt(256)`), a
  hedge or a list (`15 or 16`, `15, 16, 17`, `15-16`, `15 to 16`), non-ASCII digits (`１６`), and
  several `####` lines (or boxes) that state different numbers.

Each reading also says why it failed (`Reading.flaw`): what the hack tripwires count and the audit shows.
Everything here is linear-time regular expressions over at most MAX_CHARS characters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

MAX_CHARS = 20_000  # longer completions are not read (scored 0): see rlx.tasks.verify

# flaws: why no number was read (None: a number was read)
UNSTATED = "unstated"  # no final answer in any of the accepted places, or one that holds no number
EXPRESSION = "expression"  # an unevaluated expression: the reader would have to do the arithmetic
HEDGE = "hedge"  # two or more numbers offered as the answer: `15 or 16`, `15, 16, 17`, a range
CONFLICT = "conflict"  # several `####` lines (or boxes) that state different numbers
NON_ASCII = "non_ascii"  # digits outside 0-9 (fullwidth, Arabic-Indic, ...): not what any gold is written in
TOO_LONG = "too_long"  # over MAX_CHARS: not read
CUT = "cut"  # a completion the token budget stopped, whose `####` line is where it was cut (`#### 1` of 16?)

NUMBER = r"(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]+)?|\.[0-9]+"  # 1,000 | 16 | 16.0 | .5
_CONNECTORS = {"or", "to", "and", "plus", "minus", "times", "over", "divided", "multiplied", "by", "x", "nor",
               "through", "until", "between"}
_UNIT = r"[A-Za-z][A-Za-z'\-]*(?:\s+[A-Za-z][A-Za-z'\-]*){0,1}"  # `shells`, `square feet`: two words at most
# a whole answer that is one number: [sign] [$] [sign] NUM [%] [unit] [.]
_STATED = re.compile(rf"^([-+]?)\s*(?:\\?\$)?\s*([-+]?)\s*({NUMBER})\s*(\\?%)?\s*(?:({_UNIT})\s*)?\.?$", re.ASCII)
_TEXT = re.compile(r"\\(?:text|textbf|mathrm|mbox)\{([^{}]*)\}")
_EMPHASIS = re.compile(r"^([*_]+)(.+?)([*_]+)$", re.S)
_HASH = re.compile(r"####[^\n]*")
_PHRASE = re.compile(r"\banswer\s*(?:is|=|:)\s*:?\s*(?=([^\n]*))", re.IGNORECASE)  # the rest of the line, unconsumed
# "25 is the answer": the number right before the phrase (no other number may lead into it: `15 or 16 is ...`)
_PHRASE_AFTER = re.compile(r"(?:^|[\s(:,])(-?\$?(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]+)?)\s*(?:[A-Za-z]+\s+)?"
                           r"(?:is|was|would be)\s+(?:the|my|our)\s+(?:final\s+)?answer\b", re.IGNORECASE | re.ASCII)
_SENTENCE_END = re.compile(r"(?<=[0-9a-zA-Z%*_)])\.(?:\s|$)|[;!?]")  # a full stop not inside a number
_DIGITS = re.compile(r"[0-9]", re.ASCII)
_ANY_DIGIT = re.compile(r"\d")  # every Unicode decimal digit
_LINE_NUM = re.compile(rf"(?<![0-9.,])({NUMBER})(?![0-9])", re.ASCII)
_OPERATOR_BEFORE = re.compile(r"(?:[-+*/×÷^·{}()\[\]\\<>~±–—,;&|]|\bx|[0-9])$")
_OPERATOR_AFTER = re.compile(r"^\s*(?:[-+*/×÷^·{}()\[\]\\<>~±–—&|=]|\bx\b|(?:or|to|and|plus|minus|times|over|divided)\b)",
                             re.IGNORECASE)


@dataclass(frozen=True)
class Reading:
    """What a completion states as its final answer: `value` (None if no number was read), where it was read
    (`source`: hash | boxed | phrase | final_line | None) and why nothing was read (`flaw`)."""

    value: Decimal | None
    source: str | None
    flaw: str | None
    text: str = ""  # the answer text that was read

    @property
    def stated(self) -> bool:
        return self.value is not None


def _unwrap(text: str) -> str:
    """Without surrounding spaces, markdown emphasis (`**16**`, `_16_`), a full stop, and `\\text{}` groups."""
    text = _TEXT.sub(r" \1", text.strip()).strip()
    for _ in range(4):
        text = text.strip().rstrip(".").strip()
        m = _EMPHASIS.match(text)
        if m is None or m.group(1) != m.group(3)[::-1]:
            break
        text = m.group(2)
    return text.strip()


def parse_number(text: str) -> Decimal | None:
    """The value of `text` if it is ONE number as the module docstring allows, else None."""
    text = _unwrap(text)
    m = _STATED.match(text)
    if m is None:
        return None
    sign1, sign2, num, _, unit = m.groups()
    if sign1 and sign2:
        return None
    if unit and unit.split()[0].lower() in _CONNECTORS:
        return None
    try:
        value = Decimal(num.replace(",", ""))
    except InvalidOperation:  # cannot happen for NUMBER, kept for safety
        return None
    return -value if "-" in (sign1 + sign2) else value


def classify(text: str) -> str:
    """Why `text` (an answer that is not one number) is not one: EXPRESSION, HEDGE, NON_ASCII or UNSTATED."""
    body = _unwrap(text)
    if _ANY_DIGIT.search(body) and not _DIGITS.search(body):
        return NON_ASCII
    numbers = _LINE_NUM.findall(body)
    if not numbers:
        return UNSTATED
    if re.search(r"\\frac|\\sqrt|\\cdot|\\times|\\div|sqrt|[*/×÷^·]|[0-9)]\s*(?:[-+]|x\b)\s*[0-9(]|=", body) and \
            not re.search(r"\b(?:or|to)\b|,\s", body):
        return EXPRESSION
    if len(numbers) >= 2:
        return HEDGE
    return UNSTATED


def _one_of(answers: list[str], source: str) -> Reading:
    """The reading of one or more answers of the same kind (all `####` lines, or all boxes): the last
    decides; any other that states a different number is a CONFLICT."""
    last = answers[-1]
    value = parse_number(last)
    if value is None:
        return Reading(None, source, classify(last), last.strip())
    for other in answers[:-1]:
        v = parse_number(other)
        if v is not None and v != value:
            return Reading(None, source, CONFLICT, last.strip())
    return Reading(value, source, None, last.strip())


def top_level_boxes(text: str) -> list[str]:
    """The contents of every `\\boxed{...}` not inside another one (an unclosed one is dropped)."""
    out, i = [], 0
    while (start := text.find("\\boxed{", i)) >= 0:
        j, depth = start + len("\\boxed{"), 1
        while j < len(text) and depth:
            depth += (text[j] == "{") - (text[j] == "}")
            j += 1
        if depth:
            break
        out.append(text[start + len("\\boxed{"): j - 1])
        i = j
    return out


def _final_line(text: str) -> Reading:
    """The last number of the final non-empty line, if nothing around it makes it part of an expression or a
    list: `Grace has 18 - 2 = 16 shells.` states 16; `Grace = 18 - 2` and `15 or 16` state nothing."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return Reading(None, None, UNSTATED)
    line = lines[-1].rstrip()
    if line.endswith("?"):  # a question (an echoed problem) answers nothing
        return Reading(None, "final_line", UNSTATED, line.strip())
    sentences = [t for t in _SENTENCE_END.split(line) if t.strip()]
    line = sentences[-1] if sentences else line  # "She gave 2 of them away. So she has 16." -> its last sentence
    found = list(_LINE_NUM.finditer(line))
    if not found:
        if _ANY_DIGIT.search(line):
            return Reading(None, "final_line", NON_ASCII, line.strip())
        return Reading(None, "final_line", UNSTATED, line.strip())
    m = found[-1]
    before = line[: m.start()].rstrip(" \t*_$\\").rstrip()
    negative = False
    if before.endswith(("-", "+")):  # a sign, unless a number or a bracket stands before it (18 - 2)
        rest = before[:-1].rstrip(" \t*_$\\").rstrip()
        if not re.search(r"[0-9)\]}]$", rest):
            negative, before = before.endswith("-"), rest + " "
    before = before.rstrip()
    after = line[m.end():]
    if _OPERATOR_BEFORE.search(before) or _OPERATOR_AFTER.match(after) or \
            (before.split() and before.split()[-1].lower().strip("*_") in _CONNECTORS):
        return Reading(None, "final_line", classify(line[max(0, m.start() - 40): m.end() + 10]), line.strip())
    value = parse_number(line[m.start(): m.end()])
    if value is not None and negative:
        value = -value
    return Reading(value, "final_line", None if value is not None else UNSTATED, line.strip())


def read_stated(text: str, loose: bool = True, truncated: bool = False) -> Reading:
    """The number a completion states as its final answer (module docstring): `loose` also reads an
    "answer is N" phrase and the final line when there is neither a `####` line nor a box. `truncated`:
    the engine stopped the completion at its token budget, so its final line is where the budget fell,
    not an answer: only a `####` line with more text after it, or a closed box, is read."""
    if len(text) > MAX_CHARS:
        return Reading(None, None, TOO_LONG)
    # a #### line that holds no digit at all is the instruction's placeholder copied (`#### N`), not an answer
    found = [(m.end(), m.group(0)[4:]) for m in _HASH.finditer(text) if _ANY_DIGIT.search(m.group(0)[4:])]
    if found:
        reading = _one_of([h for _, h in found], "hash")
        tail = text[found[-1][0]:]
        if truncated and not tail.strip() and "\n" not in tail:
            return Reading(None, "hash", CUT, reading.text)  # the text ends on its line: the number may be cut short
        return reading
    boxes = top_level_boxes(text)  # a box the budget cut is never closed, so never read
    if boxes:
        return _one_of(boxes, "boxed")
    if not loose or truncated:
        return Reading(None, None, UNSTATED)
    phrases = sorted([(m.start(), m.group(1)) for m in _PHRASE.finditer(text)] +
                     [(m.start(), m.group(1) + ".") for m in _PHRASE_AFTER.finditer(text)])
    if phrases:
        readings = [_phrase(rest) for _, rest in phrases]
        last = readings[-1]
        if last.value is not None and any(r.value is not None and r.value != last.value for r in readings[:-1]):
            return Reading(None, "phrase", CONFLICT, last.text)  # "the answer is 17 ... the answer is 16"
        if last.value is not None or last.flaw is not None:
            return last
    return _final_line(text)


def _phrase(rest: str) -> Reading:
    """What one "the answer is ..." phrase states: its sentence's number (after its last `=`), a flaw when
    the sentence holds numbers but not one stated number, else (value and flaw None) nothing to read."""
    sentence = _SENTENCE_END.split(rest)[0]
    if "=" in sentence and parse_number(sentence.rsplit("=", 1)[1]) is not None:
        sentence = sentence.rsplit("=", 1)[1]  # "the answer is 2 + 2 = 4 books": the result is stated
    value = parse_number(sentence)
    if value is not None:
        return Reading(value, "phrase", None, sentence.strip())
    if _LINE_NUM.search(sentence) or (_ANY_DIGIT.search(sentence) and not _DIGITS.search(sentence)):
        return Reading(None, "phrase", classify(sentence), sentence.strip())
    return Reading(None, None, None)


def numeric_gold(gold: str) -> Decimal | None:
    """The gold answer's value when it is a plain number (GSM8K's `16`, `1,000`, `-3`, `0.5`), else None."""
    return parse_number(gold) if gold and len(gold) < 64 else None


def stated_equals(text: str, gold: str, loose: bool = True) -> bool:
    """Whether the completion states the numeric gold (`numeric_gold(gold)` must not be None)."""
    g = numeric_gold(gold)
    if g is None:
        raise ValueError(f"stated_equals: the gold answer {gold!r} is not a plain number")
    r = read_stated(text, loose)
    return r.value is not None and r.value == g
