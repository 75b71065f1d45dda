"""How a completion's answer is read: every reader of answers lives in this package, beside the tasks whose
rewards, tripwires and evaluations use them.

- here: the final answer by the tasks' convention (`final_answer`: the text after the last `####`, else
  inside the last `\\boxed{}`, else the whole text; what the `correct` reward compares, what math-verify
  verifies in rlx.tasks.verify and what the eval's majority vote counts), a completion's boxes
  (`top_level_boxes`, `last_boxed`) and an answer without its markdown wrapping (`unwrap`);
- rlx.tasks.answers.stated: the number a completion states as its answer (the `stated_answer` reward);
- rlx.tasks.answers.readings: the benchmark's own readings (lm-eval's GSM8K strict-match and
  flexible-extract, MATH's math-verify) and which of them a set gets.

Boxes are read the way math-verify reads them (checked on math-verify 0.9.0, tests/tasks/test_final_answer.py):
a box counts once it is closed, and the last box is the last one opened that closes: the inner one when boxes
nest (`\\boxed{5 \\boxed{4}}` answers 4; the stated reading calls it a hedge), the closed one inside a box
left open (`\\boxed{1 ... \\boxed{2}` answers 2), an earlier one when the last is left open (`\\boxed{1} ...
\\boxed{2` answers 1). lm-eval 0.4.13's hendrycks_math reads the first two alike and the third as no answer;
its GSM8K readings read no box at all.
"""

from __future__ import annotations

import re

_BOX_OPEN = "\\boxed{"
_BRACES = re.compile(r"\\boxed\{|[{}]")
# markdown emphasis: a run of * and _ at each end, mirrored (**x**, _x_, **_x_**), no space inside the markers
_EMPHASIS = re.compile(r"^([*_]+)([^\s*_](?:.*[^\s*_])?)([*_]+)$", re.S)
_FULL_STOP = re.compile(r"\.\s*$")  # a sentence's full stop ("#### 6.")


def _closed_boxes(text: str) -> list[tuple[int, int]]:
    """(start, end) of the content of every closed `\\boxed{...}`, in the order they open; an unclosed one is
    left out, and so are stray braces outside boxes (one linear pass)."""
    spans, open_boxes, depth = [], [], 0  # open_boxes: (content start, brace depth outside the box)
    for m in _BRACES.finditer(text):
        token = m.group(0)
        if token == "}":
            if depth == 0:
                continue  # a stray closing brace
            depth -= 1
            if open_boxes and open_boxes[-1][1] == depth:
                spans.append((open_boxes.pop()[0], m.start()))
        else:
            if token == _BOX_OPEN:
                open_boxes.append((m.end(), depth))
            depth += 1
    return sorted(spans)


def top_level_boxes(text: str) -> list[str]:
    """The contents of every closed `\\boxed{...}` not inside another closed one, in order."""
    out, end = [], -1
    for start, stop in _closed_boxes(text):
        if start > end:
            out.append(text[start:stop])
            end = stop
    return out


def last_boxed(text: str) -> str | None:
    """The content of the last closed `\\boxed{...}` opened (the inner one of nested boxes); None without one."""
    spans = _closed_boxes(text)
    return text[spans[-1][0]: spans[-1][1]] if spans else None


def unwrap(answer: str) -> str:
    """The answer without surrounding spaces, a sentence's full stop and markdown emphasis around it, only as
    matching wrappers at both ends (`**18**`, `***18***.` -> `18`; `1_000`, `2*3*4`, `** 18 **` stay)."""
    text = _FULL_STOP.sub("", answer.strip())
    while (m := _EMPHASIS.match(text)) is not None and m.group(3) == m.group(1)[::-1]:
        text = _FULL_STOP.sub("", m.group(2))
    return text


def final_answer(text: str) -> str | None:
    """The final answer of a completion: the text after the last '####' or inside the last \\boxed{}, else the whole."""
    if "####" in text:
        return text.rsplit("####", 1)[1].strip()
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed.strip()
    return text.strip()
