"""Stated answers: the number a completion states as its final answer, read as text (linear-time regular
expressions) and never evaluated: an expression such as `18 - 2` states nothing, and each reading says why
(`Reading.flaw`). The rule and why: docs/rewards.md, "The stated-number rule" and "What a reader refuses".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal

from rlx.tasks.answers import top_level_boxes, unwrap

MAX_CHARS = 20_000  # longer completions are not read (scored 0): see rlx.tasks.verify

# flaws: why no number was read (None: a number was read)
UNSTATED = "unstated"  # no final answer in any of the accepted places, or one that holds no number
EXPRESSION = "expression"  # an unevaluated expression: the reader would have to do the arithmetic
HEDGE = "hedge"  # two or more numbers offered as the answer: `15 or 16`, `15, 16, 17`, a range
CONFLICT = "conflict"  # several `####` lines (or boxes) that state different numbers
NON_ASCII = "non_ascii"  # digits outside 0-9 (fullwidth, Arabic-Indic, ...): not what any gold is written in
TOO_LONG = "too_long"  # over MAX_CHARS: not read
NEGATED = "negated"  # the clause that states the number denies it: `It is not 16.`, `16 is not the answer`
QUALIFIED = "qualified"  # an approximate or bounded number: `about 16`, `at least 16`, `maybe 16`, `16 or so`
CUT = "cut"  # a completion the token budget stopped, whose `####` line is where it was cut (`#### 1` of 16?)

NUMBER = r"(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]+)?|\.[0-9]+"  # 1,000 | 16 | 16.0 | .5
_CONNECTORS = {"or", "to", "and", "plus", "minus", "times", "over", "divided", "multiplied", "by", "x", "nor",
               "through", "until", "between"}
_UNIT = r"[A-Za-z][A-Za-z'\-]*(?:\s+[A-Za-z][A-Za-z'\-]*){0,1}"  # `shells`, `square feet`: two words at most
# a whole answer that is one number: [sign] [$] [sign] NUM [%] [unit] [.]
_STATED = re.compile(rf"^([-+]?)\s*(?:\\?\$)?\s*([-+]?)\s*({NUMBER})\s*(\\?%)?\s*(?:({_UNIT})\s*)?\.?$", re.ASCII)
_TEXT = re.compile(r"\\(?:text|textbf|mathrm|mbox)\{([^{}]*)\}")
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
# what a reader reads around a number: its clause (between clause breaks: `,` not inside a number, `;`, `:`, a
# conjunction that starts a new statement), a negation anywhere in that clause, a qualifier or a bound before it
_CLAUSE_BREAK = re.compile(r",(?![0-9]{3}(?![0-9]))|[;:]|\b(?:(?<!or\s)so|but|and|then|therefore|thus|hence|"
                           r"because|since|while|although|though|whereas|however)\b", re.IGNORECASE)
_NEXT_STATEMENT = re.compile(r",?\s*\b(?:so|but|then|therefore|thus|hence|because|since|which)\b", re.IGNORECASE)
_RELATIVE = re.compile(r"\b(?:that|which|who|whom|whose|where)\b", re.IGNORECASE)  # ends a clause after the number
_COPULA = re.compile(r"\b(?:is|are|was|were|equals?)\b|=", re.IGNORECASE)
# after the number a negation denies it only as its predicate (`16 is not the answer`); `16 students don't read
# novels` counts what the negation describes
_DENIED_AFTER = re.compile(r"^\s*(?:(?:is|are|was|were|would\s+be|will\s+be|['’]s|seems?)\s+(?:not|never)\b|"
                           r"(?:is|are|was|were)n['’]t\b)", re.IGNORECASE)
_NEGATION = re.compile(r"\b(?:not|no|never|none|neither|nor|cannot|without)\b|n['’]t\b", re.IGNORECASE)
_HEDGE_WORDS = r"maybe|perhaps|probably|possibly|likely|approximately|approx|roughly|presumably|apparently|estimated"
_HEDGED = re.compile(rf"\b(?:{_HEDGE_WORDS})\b", re.IGNORECASE)  # anywhere in the clause before the number
_BOUND_BEFORE = re.compile(r"(?:\b(?:at\s+(?:least|most)|(?:more|less|fewer|greater|smaller|larger|higher|lower)\s+"
                           r"than|over|under|above|below|up\s+to|close\s+to|nearly|almost|about|around|circa)|"
                           r"[~≈<>≤≥]|\\(?:approx|sim|leq?|geq?|lt|gt))\s*(?:\\?\$)?\s*[*_]*\s*[-+]?$",
                           re.IGNORECASE)
_QUALIFIER_AFTER = re.compile(r"\b(?:or\s+(?:so|more|less|fewer|thereabouts)|at\s+(?:least|most)|give\s+or\s+take|"
                              rf"more\s+or\s+less|{_HEDGE_WORDS}|ish|maximum|minimum|tops)\b|^-?ish\b",
                              re.IGNORECASE)  # anywhere after the number in its clause
_NOT_A_UNIT = {"least", "most", "about", "around", "ish", "maximum", "minimum", "tops", "not", "never", "no",
               *_HEDGE_WORDS.split("|")}
# a later statement of a number: `=`, or a verb that says what something is / has, right before the number
_STATES = re.compile(r"(?:=|\b(?:is|are|was|were|be|equals?|makes?|gives?|has|have|had|gets?|got|totals?|remains?)\b|"
                     r"['’]s)\s*(?:(?:now|still|only|exactly|just|then|also|actually|really|left\s+with|"
                     r"a\s+total\s+of|in\s+total)\s+)*(?:\\?\$|[*_]|\s)*-?\s*$", re.IGNORECASE)
_OPERATOR_AFTER = re.compile(r"^\s*(?:[-+*/×÷^·{}()\[\]\\<>~±–—&|=]|\bx\b|(?:or|to|and|plus|minus|times|over|divided)\b)",
                             re.IGNORECASE)


@dataclass(frozen=True)
class Reading:
    """What a completion states: `value` (None: none read), `source` (hash | boxed | phrase | final_line), `flaw`."""

    value: Decimal | None
    source: str | None
    flaw: str | None
    text: str = ""  # the answer text that was read


def _bare(text: str) -> str:
    """The answer without its wrapping (rlx.tasks.answers.unwrap) and with its `\\text{}` groups as plain words."""
    return unwrap(_TEXT.sub(r" \1", text)).strip()


def parse_number(text: str) -> Decimal | None:
    """The value of `text` if it is ONE number (docs/rewards.md: what counts as the number), else None."""
    text = _bare(text)
    m = _STATED.match(text)
    if m is None:
        return None
    sign1, sign2, num, _, unit = m.groups()
    if sign1 and sign2:
        return None
    if unit and (unit.split()[0].lower() in _CONNECTORS or any(w.lower() in _NOT_A_UNIT for w in unit.split())):
        return None  # `16 or so`, `16 at least`, `16 approximately`: a bound or a hedge, not a unit
    value = Decimal(num.replace(",", ""))  # NUMBER is always a valid decimal
    return -value if "-" in (sign1 + sign2) else value


def classify(text: str) -> str:
    """Why `text` (an answer that is not one number) is not one: EXPRESSION, HEDGE, NON_ASCII or UNSTATED."""
    body = _bare(text)
    if _ANY_DIGIT.search(body) and not _DIGITS.search(body):
        return NON_ASCII
    numbers = list(_LINE_NUM.finditer(body))
    if not numbers:
        return UNSTATED
    for m in numbers:
        flaw = clause_flaw(body, m.start(), m.end())
        if flaw is not None:
            return flaw
    if re.search(r"\\frac|\\sqrt|\\cdot|\\times|\\div|sqrt|[*/×÷^·]|[0-9)]\s*(?:[-+]|x\b)\s*[0-9(]|=", body) and \
            not re.search(r"\b(?:or|to)\b|,\s", body):
        return EXPRESSION
    if len(numbers) >= 2:
        return HEDGE
    return UNSTATED


def _clause(text: str, start: int, end: int) -> tuple[str, str]:
    """(the clause's text before text[start:end], after it), bounded by the line, sentence and clause breaks."""
    lo = text.rfind("\n", 0, start) + 1
    for pattern in (_SENTENCE_END, _CLAUSE_BREAK):
        lo = max([lo] + [m.end() for m in pattern.finditer(text, lo, start)])
    hi = text.find("\n", end)
    hi = len(text) if hi < 0 else hi
    for pattern in (_SENTENCE_END, _CLAUSE_BREAK, _RELATIVE):
        m = pattern.search(text, end, hi)
        hi = m.start() if m else hi
    return text[lo:start], text[end:hi]


def _denies(before: str, after: str) -> bool:
    """Whether a negation in the clause denies its number: any before it (`It is not 16`, `Grace does not have
    16`, `I don't think the answer is 16`) unless it describes the subject of a copula that states the number
    (`the students who don't read novels are 16`), and a copula's negation right after it (`16 is not it`)."""
    if _DENIED_AFTER.match(after):
        return True
    negations = list(_NEGATION.finditer(before))
    if not negations:
        return False
    last = negations[-1]
    return not (_RELATIVE.search(before, 0, last.start()) and _COPULA.search(before, last.end()))


def clause_flaw(text: str, start: int, end: int) -> str | None:
    """NEGATED or QUALIFIED when what text[start:end] states is denied (`_denies`), hedged (`maybe` before it in
    its clause), bounded or approximate (`at least`, `about` right before it; `or so` after); else None."""
    before, after = _clause(text, start, end)
    if _denies(before, after):
        return NEGATED
    if _HEDGED.search(before) or _BOUND_BEFORE.search(before) or _QUALIFIER_AFTER.search(after):
        return QUALIFIED
    return None


def statements(text: str) -> list[Decimal]:
    """The numbers `text` states as a reader finds them after an answer: a sentence that is one number, and one
    that `=` or a verb such as `is` / `has` leads into (`3 + 6 = 9`, `Grace has 7 shells`) unless it starts an
    expression or its clause denies or qualifies it; passing numbers (`Step 2`) state nothing."""
    out = []
    for line in text.splitlines():
        for sentence in _SENTENCE_END.split(line):
            value = parse_number(sentence) if sentence.strip() else None
            if value is not None:
                out.append(value)
                continue
            for m in _LINE_NUM.finditer(sentence):
                before = sentence[: m.start()]
                if not _STATES.search(before) or _OPERATOR_AFTER.match(sentence[m.end():]) or \
                        clause_flaw(sentence, m.start(), m.end()) is not None:
                    continue
                value = parse_number(m.group(1))
                if value is not None:
                    out.append(-value if before.rstrip(" \t*_$\\").endswith("-") else value)
    return out


def _one_of(answers: list[str], source: str) -> Reading:
    """The reading of answers of one kind (`####` lines, or boxes): the last, a CONFLICT if another differs."""
    last = answers[-1]
    value = parse_number(last)
    if value is None:
        return Reading(None, source, classify(last), last.strip())
    for other in answers[:-1]:
        v = parse_number(other)
        if v is not None and v != value:
            return Reading(None, source, CONFLICT, last.strip())
    return Reading(value, source, None, last.strip())


def _final_line(text: str) -> Reading:
    """The last number of the final line unless it is part of an expression or a list (`Grace = 18 - 2`)."""
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
    flaw = clause_flaw(line, m.start(), m.end())  # `It is not 16`, `about 16`, `at least 16`
    if flaw is not None:
        return Reading(None, "final_line", flaw, line.strip())
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
    """The number a completion states as its final answer: `loose` also reads an "answer is N" phrase, then the
    final line, when there is neither a `####` line nor a box. `truncated` (cut at the token budget): only a
    `####` line with more text after it, or a closed box, is read."""
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
    phrases = _phrases(text)
    if phrases:
        start, end, last = phrases[-1]
        if last.value is not None and any(r.value is not None and r.value != last.value for _, _, r in phrases[:-1]):
            return Reading(None, "phrase", CONFLICT, last.text)  # "the answer is 17 ... the answer is 16"
        if last.value is not None:
            flaw = clause_flaw(text, start, end)  # "I don't think the answer is 16", "maybe 16 is the answer"
            if flaw is None and any(v != last.value for v in statements(text[end:])):
                flaw = CONFLICT  # a later line corrects it: "The answer is 6.\n\nSo, the solution is 3 + 6 = 9."
            return last if flaw is None else Reading(None, "phrase", flaw, last.text)
        if last.flaw is not None:
            return last
    return _final_line(text)


def _phrases(text: str) -> list[tuple[int, int, Reading]]:
    """Every "the answer is N" / "N is the answer" in order: (its start, where what it states ends, the Reading)."""
    found = []
    for m in _PHRASE.finditer(text):
        reading, length = _phrase(m.group(1))
        found.append((m.start(), m.end() + length, reading))
    for m in _PHRASE_AFTER.finditer(text):
        reading, _ = _phrase(m.group(1) + ".")
        found.append((m.start(), m.end(), reading))
    return sorted(found, key=lambda f: f[0])


def _phrase(rest: str) -> tuple[Reading, int]:
    """What one "the answer is ..." phrase states, and how much of `rest` that is: its sentence's number (after its
    last `=`) up to a conjunction that starts another statement (`6, so ... 3 + 6 = 9` states 6); a flaw when
    that holds numbers but not one stated number; value and flaw None when nothing is read."""
    sentence = _SENTENCE_END.split(rest)[0]
    cut = _NEXT_STATEMENT.search(sentence)
    sentence = sentence[: cut.start()] if cut and _LINE_NUM.search(sentence[: cut.start()]) else sentence
    length, stated = len(sentence), sentence
    if "=" in stated and parse_number(stated.rsplit("=", 1)[1]) is not None:
        stated = stated.rsplit("=", 1)[1]  # "the answer is 2 + 2 = 4 books": the result is stated
    value = parse_number(stated)
    if value is not None:
        return Reading(value, "phrase", None, stated.strip()), length
    if _LINE_NUM.search(stated) or (_ANY_DIGIT.search(stated) and not _DIGITS.search(stated)):
        return Reading(None, "phrase", classify(stated), stated.strip()), length
    return Reading(None, None, None), length


def answered_value(reading: Reading) -> Decimal | None:
    """The reading's value, else the number a qualifier bounds (`about 16`: the guess tripwire's answer)."""
    if reading.value is not None or reading.flaw != QUALIFIED:
        return reading.value
    found = _LINE_NUM.findall(reading.text)
    return Decimal(found[-1].replace(",", "")) if found else None


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
