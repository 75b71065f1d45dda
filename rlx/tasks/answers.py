"""The final answer of a completion, by the tasks' convention: the text after the last `####`, else inside
the last `\\boxed{}`, else the whole text. What the `correct` reward compares, what math_verify verifies
(rlx.tasks.verify) and what the eval's majority vote counts (rlx.eval)."""

from __future__ import annotations


def last_boxed(text: str) -> str | None:
    """The content of the last \\boxed{...}, nested braces included (None if there is none or it is unclosed)."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    i = start + len("\\boxed{")
    depth = 1
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i:j]
    return None


def final_answer(text: str) -> str | None:
    """The final answer of a completion: the text after the last '####' or inside the last \\boxed{}, else the whole."""
    if "####" in text:
        return text.rsplit("####", 1)[1].strip()
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed.strip()
    return text.strip()
