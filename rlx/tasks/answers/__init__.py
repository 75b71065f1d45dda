"""How a completion's answer is read (every reader lives in this package): here the final answer by the tasks'
convention (`final_answer`), boxes read as math-verify reads them (docs/eval.md, "Boxes") and `unwrap`.
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
