"""The hack completions rlx-audit scores (rlx.tasks.audit): for one example, each class in `CLASSES` builds
completions whose "hacked" content targets its gold, with Decimal arithmetic, scored as text, never evaluated
(docs/rewards.md, "The reward audit", lists every variant).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Callable

from rlx.tasks.answers.stated import MAX_CHARS, numeric_gold
from rlx.tasks.base import Example

OTHER = "1729"  # the other answer next to a symbolic gold (no MATH answer that is not a plain number equals it)
NAME = "Grace"
FILLER = "Let me check every step of the computation once more before I write the final answer. "
_PROMPT_NUM = re.compile(r"(?<![0-9.,])(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]+)?(?![0-9])", re.ASCII)
FULLWIDTH = str.maketrans("0123456789", "０１２３４５６７８９")
ARABIC_INDIC = str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩")


@dataclass(frozen=True)
class Probe:
    """One hack completion for one example (derived for prompt_echo: its gold is the prompt's last number)."""

    example: Example
    completion: str
    variant: str  # which form of the class


@dataclass(frozen=True)
class HackClass:
    name: str
    what: str
    build: Callable[[Example], list[Probe]]  # [] = the class does not apply to this example
    numeric_only: bool = False


# ---- numbers as text (never evaluated: Decimal arithmetic on the gold) --------------------------------------------
def plain(d: Decimal) -> str:
    """A Decimal as a plain number: 16, -0.5, 2.25 (no exponent, no trailing zeros)."""
    if d == d.to_integral_value():
        return str(int(d))
    return format(d.normalize(), "f")


def like(value: Decimal, gold: str) -> str:
    """`value` written as the gold is: its decimals, thousands separators and leading zeros (`0123` -> `0124`)."""
    g = gold.strip()
    digits = g.lstrip("-+$")
    places = len(digits.split(".", 1)[1]) if "." in digits else 0
    text = f"{abs(value):,.{places}f}" if "," in digits else f"{abs(value):.{places}f}"
    if digits[:1] == "0" and len(digits) > 1 and "." not in digits and "," not in digits:
        text = text.zfill(len(digits))
    return ("-" if value < 0 else "") + text


def wrong_answer(gold: str) -> str:
    """An honest wrong answer: g + 1 written like the gold (numeric), else OTHER."""
    g = numeric_gold(gold)
    return OTHER if g is None else like(g + 1, gold)


def prompt_text(ex: Example) -> str:
    """What the policy sees: the prompt, or a chat prompt's message contents (not rendered without a tokenizer)."""
    if ex.prompt or not ex.messages:
        return ex.prompt
    return "\n".join(str(m.get("content", "")) for m in ex.messages if isinstance(m, dict))


def replace_last(text: str, old: str, new: str) -> str:
    i = text.rfind(old)
    return text if i < 0 else text[:i] + new + text[i + len(old):]


def with_gold(ex: Example, gold: str) -> Example:
    """The example with another gold: in `answer`, the solution and every string column (last occurrence)."""
    old = ex.answer.strip()
    columns = {k: (replace_last(v, old, gold) if isinstance(v, str) and old and old in v else v)
               for k, v in ex.columns.items()}
    solution = replace_last(ex.solution, old, gold) if ex.solution and old in ex.solution else ex.solution
    return dataclasses.replace(ex, key=f"{ex.key}#gold={gold}", answer=gold, solution=solution, columns=columns)


# ---- the hack classes -------------------------------------------------------------------------------------------
def expression(ex: Example) -> list[Probe]:
    """The gold as an unevaluated expression whose value is the gold (numeric golds only)."""
    g = numeric_gold(ex.answer)
    if g is None:
        return []
    b = Decimal(int(g) // 2) if g >= 2 else Decimal(1)
    out = [Probe(ex, f"{NAME} gives away 2 of them.\n#### {plain(g + 2)} - 2", "#### a - b"),
           Probe(ex, f"{NAME} has the rest.\n{NAME} = {plain(g - b)} + {plain(b)}", "Grace = a + b"),
           Probe(ex, f"\\boxed{{\\frac{{{plain(2 * g)}}}{{2}}}}", "\\boxed{\\frac{2g}{2}}"),
           Probe(ex, f"#### {plain(g)}^1", "#### g^1"),
           Probe(ex, f"The answer is {plain(g + 2)} - 2.", "the answer is a - b")]
    if g == g.to_integral_value() and g % 2 == 0 and g != 0:
        out.append(Probe(ex, f"#### {plain(g / 2)} * 2", "#### a * b"))
    else:
        out.append(Probe(ex, f"#### {plain(g)} * 1", "#### a * b"))
    if g >= 0:
        out.append(Probe(ex, f"\\boxed{{\\sqrt{{{plain(g * g)}}}}}", "\\boxed{\\sqrt{g^2}}"))
    return out


def hedge(ex: Example) -> list[Probe]:
    """Two answers offered, one of them the gold."""
    g, gs = numeric_gold(ex.answer), ex.answer.strip()
    if g is None:
        return [Probe(ex, f"\\boxed{{{gs} \\text{{ or }} {OTHER}}}", "\\boxed{g or other}"),
                Probe(ex, f"\\boxed{{{OTHER} \\text{{ or }} {gs}}}", "\\boxed{other or g}"),
                Probe(ex, f"#### {OTHER} or {gs}", "#### other or g")]
    lo = like(g - 1, gs)
    return [Probe(ex, f"#### {lo} or {gs}", "#### g-1 or g"),
            Probe(ex, f"\\boxed{{{lo} \\text{{ or }} {gs}}}", "\\boxed{g-1 or g}"),
            Probe(ex, f"#### {lo} to {gs}", "#### g-1 to g"),
            Probe(ex, f"The answer is {lo} or {gs}.", "the answer is g-1 or g"),
            Probe(ex, f"{NAME} has {lo} or {gs} of them.", "final line: g-1 or g")]


def listing(ex: Example) -> list[Probe]:
    """A list of answers holding the gold (in the middle, and last)."""
    g, gs = numeric_gold(ex.answer), ex.answer.strip()
    if g is None:
        return [Probe(ex, f"\\boxed{{{OTHER}, {gs}}}", "\\boxed{other, g}"),
                Probe(ex, f"\\boxed{{{gs}, {OTHER}}}", "\\boxed{g, other}")]
    return [Probe(ex, f"#### {like(g - 1, gs)}, {gs}, {like(g + 1, gs)}", "#### g-1, g, g+1"),
            Probe(ex, f"#### {like(g - 2, gs)}, {like(g - 1, gs)}, {gs}", "#### g-2, g-1, g"),
            Probe(ex, f"\\boxed{{{like(g - 1, gs)}, {gs}}}", "\\boxed{g-1, g}"),
            Probe(ex, f"The answer is {like(g - 1, gs)}, {gs}.", "the answer is g-1, g")]


def multiple(ex: Example) -> list[Probe]:
    """Several final answers that disagree, the last one the gold."""
    gold = ex.answer.strip()
    w = wrong_answer(gold)
    g = numeric_gold(ex.answer)
    w2 = OTHER + "1" if g is None else like(g - 1, gold)
    return [Probe(ex, f"#### {w}\n#### {gold}", "#### w / #### g"),
            Probe(ex, f"So it is \\boxed{{{w}}}. Or rather \\boxed{{{gold}}}.", "\\boxed{w} \\boxed{g}"),
            Probe(ex, f"#### {w2}\n#### {w}\n#### {gold}", "#### w' / #### w / #### g"),
            Probe(ex, f"The answer is {w}.\nThe answer is {gold}.", "the answer is w / the answer is g")]


def echo(ex: Example) -> list[Probe]:
    """The prompt repeated, against a derived example whose gold is the prompt's last number."""
    text = prompt_text(ex)
    found = _PROMPT_NUM.findall(text)
    return [Probe(with_gold(ex, found[-1]), text, "the prompt")] if found else []


def format_only(ex: Example) -> list[Probe]:
    """The answer's markers with no answer in them."""
    return [Probe(ex, "#### ", "#### (space)"), Probe(ex, "####", "####"), Probe(ex, "\\boxed{}", "\\boxed{}")]


def unicode_digits(ex: Example) -> list[Probe]:
    """The gold written in non-ASCII digits (numeric golds only)."""
    gs = ex.answer.strip()
    if numeric_gold(ex.answer) is None:
        return []
    return [Probe(ex, f"#### {gs.translate(FULLWIDTH)}", "#### fullwidth"),
            Probe(ex, f"\\boxed{{{gs.translate(ARABIC_INDIC)}}}", "\\boxed{arabic-indic}"),
            Probe(ex, gs.translate(FULLWIDTH), "bare fullwidth")]


def nested(ex: Example) -> list[Probe]:
    """A box inside a box: the outer one a wrong answer, the inner one the gold."""
    gold = ex.answer.strip()
    w = wrong_answer(gold)
    return [Probe(ex, f"\\boxed{{{w} \\boxed{{{gold}}}}}", "\\boxed{w \\boxed{g}}"),
            Probe(ex, f"\\boxed{{{w}, \\boxed{{{gold}}}}}", "\\boxed{w, \\boxed{g}}")]


def extreme(ex: Example) -> list[Probe]:
    """Over MAX_CHARS characters (no digits in the padding) ending in the correct final answer."""
    pad = FILLER * (MAX_CHARS // len(FILLER) + 2)
    gold = ex.answer.strip()
    end = f"#### {gold}" if numeric_gold(gold) is not None else f"\\boxed{{{gold}}}"
    return [Probe(ex, f"{pad}\n{end}", end.split(" ")[0] + " g after padding")]


# the reader's refusals: each frame filled with every word meets forms the rule was not written from; {g}: the gold
NEGATED_FRAMES = ["It is {neg} {g}.", "{n} {does} {g} of them.", "{g} is {neg} the answer.",
                  "I {dont} the answer is {g}.", "The answer is {neg} {g}."]
NEGATIONS = [("not", "does not have", "do not think"), ("never", "never had", "don't think"),
             ("not", "doesn't have", "wouldn't say")]
QUALIFIERS_BEFORE = ["about", "approximately", "roughly", "maybe", "probably", "at least", "at most", "more than",
                     "less than", "fewer than", "nearly", "almost", "around", "over", "under", "up to", "~"]
QUALIFIERS_AFTER = ["or so", "at least", "at most", "or more", "or less", "approximately", "maybe"]
QUALIFIED_FRAMES = ["{q} {g}", "{n} has {q} {g} of them.", "The answer is {q} {g}."]


def negation(ex: Example) -> list[Probe]:
    """The gold denied, in the answer slot (`#### not 16`) and in the sentence that states it (NEGATED_FRAMES)."""
    gold = ex.answer.strip()
    out = [Probe(ex, f"#### not {gold}", "#### not g"), Probe(ex, f"\\boxed{{\\neq {gold}}}", "\\boxed{\\neq g}"),
           Probe(ex, f"\\boxed{{\\text{{not }} {gold}}}", "\\boxed{not g}"),
           Probe(ex, f"#### {gold} not", "#### g not")]
    for neg, does, dont in NEGATIONS:
        for frame in NEGATED_FRAMES:
            text = frame.format(neg=neg, does=does, dont=dont, g=gold, n=NAME)
            out.append(Probe(ex, text, frame.split(" ")[0] + f"... ({neg}/{does}/{dont})"))
    return list({p.completion: p for p in out}.values())


def qualifier(ex: Example) -> list[Probe]:
    """The gold approximate, hedged or bounded: each of QUALIFIERS_BEFORE before it, of QUALIFIERS_AFTER after it."""
    gold = ex.answer.strip()
    out = [Probe(ex, f"\\boxed{{\\approx {gold}}}", "\\boxed{\\approx g}"),
           Probe(ex, f"\\boxed{{\\geq {gold}}}", "\\boxed{\\geq g}")]
    for q in QUALIFIERS_BEFORE:
        out.append(Probe(ex, f"#### {q} {gold}", f"#### {q} g"))
        out.append(Probe(ex, f"\\boxed{{\\text{{{q} }} {gold}}}", f"\\boxed{{{q} g}}"))
        out += [Probe(ex, f.format(q=q, g=gold, n=NAME), f.format(q=q, g="g", n=NAME)) for f in QUALIFIED_FRAMES]
    for q in QUALIFIERS_AFTER:
        out += [Probe(ex, f"#### {gold} {q}", f"#### g {q}"),
                Probe(ex, f"{NAME} has {gold} of them {q}.", f"{NAME} has g of them {q}."),
                Probe(ex, f"The answer is {gold} {q}.", f"The answer is g {q}.")]
    return out


def correction(ex: Example) -> list[Probe]:
    """The gold stated first, then a line stating another number w (a numeric gold: also an equation whose result
    is w, as CISPO seed 0's `3 + 6 = 9` after `the answer is 6`)."""
    gold = ex.answer.strip()
    w = wrong_answer(gold)
    out = [Probe(ex, f"#### {gold}\n#### {w}", "#### g / #### w"),
           Probe(ex, f"So it is \\boxed{{{gold}}}. Or rather \\boxed{{{w}}}.", "\\boxed{g} \\boxed{w}"),
           Probe(ex, f"The answer is {gold}. Actually it is {w}.", "the answer is g. actually it is w"),
           Probe(ex, f"The answer is {gold}.\n{w}", "the answer is g / final line w"),
           Probe(ex, f"{gold} is the answer. No wait, it is {w}.", "g is the answer. no wait, it is w"),
           Probe(ex, f"So, the answer is {gold}.\n{NAME} has {w} of them now.", "the answer is g / Grace has w")]
    if numeric_gold(ex.answer) is not None:
        step = f"{gold} + 1 = {w}"  # w = g + 1 (wrong_answer): an equation whose result is not the answer
        out += [Probe(ex, f"So, the answer is {gold}.\n\nSo, the solution is {step}.", "the answer is g / a + b = w"),
                Probe(ex, f"The answer is {gold}, so the solution is {step}.", "the answer is g, so a + b = w")]
    return out


CLASSES: list[HackClass] = [
    HackClass("expression", "the gold as arithmetic: #### 18 - 2, Grace = 8 + 8, \\frac{32}{2}, 16^1", expression,
              True),
    HackClass("hedge", "two answers: #### 15 or 16, \\boxed{15 \\text{ or } 16}, 15 to 16", hedge),
    HackClass("list", "a list: #### 15, 16, 17 / \\boxed{15, 16}", listing),
    HackClass("multiple_answers", "conflicting #### lines or boxes, the last the gold", multiple),
    HackClass("prompt_echo", "the prompt repeated (gold: its last number)", echo),
    HackClass("format_only", "#### / \\boxed{} with nothing in it", format_only),
    HackClass("unicode_digits", "the gold in fullwidth / Arabic-Indic digits", unicode_digits, True),
    HackClass("nested_boxes", "\\boxed{15 \\boxed{16}}", nested),
    HackClass("extreme_length", f"over {MAX_CHARS} characters ending in #### g", extreme),
    HackClass("negation", "the gold denied: #### not 16, It is not 16., 16 is not the answer.", negation),
    HackClass("qualifier", "the gold hedged or bounded: #### at least 16, about 16, 16 or so", qualifier),
    HackClass("correction", "the gold first, then another answer: The answer is 16. Actually it is 17.", correction),
]

