"""The SFT stage's rows: (prompt, completion) pairs rendered as RL renders its prompts, from the task's training
split or a local file, the task's held-out questions dropped and checked absent."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass

from rlx.tasks import FILE_TASKS
from rlx.tasks.files import held_out_questions, question_text, read_rows


@dataclass(frozen=True)
class Pair:
    """One SFT row: `prompt` as the policy sees it, the `completion` it should write, `ids`: question_text of every
    form of its question (checked against the held-out ones), `key`: its task example (data=task)."""

    prompt: str
    completion: str
    ids: frozenset
    key: str | None = None


def _identities(*forms) -> frozenset:
    """question_text of every non-empty form of one question."""
    return frozenset(question_text(f) for f in forms if f)


def _last_user(messages: list) -> str | None:
    return next((m["content"] for m in reversed(messages) if m.get("role") == "user"), None)


def render(tok, prompt_messages: list | None, prompt_text: str, completion: str, what: str) -> tuple[str, str]:
    """(prompt, completion) text; chat: the completion is what the template adds for the assistant turn."""
    if prompt_messages is None:
        return prompt_text, completion
    if not getattr(tok, "chat_template", None):
        raise ValueError(f"model.sft.data: {what} is a chat prompt but the model's tokenizer has no chat template; "
                         f"set model.chat_template")
    prompt = tok.apply_chat_template(prompt_messages, add_generation_prompt=True, tokenize=False)
    full = tok.apply_chat_template(prompt_messages + [{"role": "assistant", "content": completion}], tokenize=False)
    if not full.startswith(prompt):  # e.g. a template that rewrites earlier turns once an answer follows
        raise ValueError(f"model.sft.data: {what}: the chat template renders the prompt with the generation prompt "
                         f"as {prompt[-60:]!r}, which does not begin the rendered conversation {full[:len(prompt)][-60:]!r}"
                         f"; the completion tokens cannot be told from the prompt's (set model.chat_template)")
    return prompt, full[len(prompt):]


def _chat(value, key: str, column: str, what: str, answered: bool) -> list[dict]:
    """A chat column's value as [{role, content}, ...] (`answered`: 2+ turns ending with the assistant's)."""
    ok = (isinstance(value, (list, tuple)) and len(value) >= (2 if answered else 1) and all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in value)
        and (not answered or value[-1]["role"] == "assistant"))
    if not ok:
        shape = "of at least two turns ending with the assistant's" if answered else "(or a string question)"
        raise ValueError(f"model.sft.{key}: column '{column}' of {what} must be a chat [{{'role': ..., 'content': "
                         f"...}}, ...] {shape}; got {str(value)[:120]!r}")
    return [{"role": m["role"], "content": m["content"]} for m in value]


def _row_pair(row: dict, i: int, sft, template: str, chat_prompts: bool, tok, where: str) -> Pair:
    """A file row -> Pair: a chat row (messages_field) or a question/answer row."""
    what = f"row {i} of {where}"
    if row.get(sft.messages_field) is not None:
        msgs = _chat(row[sft.messages_field], "messages_field", sft.messages_field, what, answered=True)
        prompt, completion = render(tok, msgs[:-1], "", msgs[-1]["content"], what)
        return Pair(prompt, completion, _identities(msgs[:-1], _last_user(msgs[:-1]), prompt))
    for field, key in ((sft.question_field, "question_field"), (sft.answer_field, "answer_field")):
        if field not in row:
            raise ValueError(f"model.sft.{key}: column '{field}' is not in {what} (its columns: {sorted(row)}), "
                             f"nor a chat column '{sft.messages_field}' (model.sft.messages_field)")
    q, answer = row[sft.question_field], str(row[sft.answer_field])
    if isinstance(q, str):
        text = template.format(question=q)
        messages = [{"role": "user", "content": text}] if chat_prompts else None
    else:  # a chat prompt in the question column
        text, messages = "", _chat(q, "question_field", sft.question_field, what, answered=False)
    prompt, completion = render(tok, messages, text, answer, what)
    return Pair(prompt, completion, _identities(q, text, messages, messages and _last_user(messages), prompt))


def _example_pair(e, tok) -> Pair:
    """A (rendered) task training example -> Pair; its worked solution (Example.target) is the completion."""
    if e.messages is None:
        return Pair(e.prompt, e.target, _identities(e.prompt), e.key)
    prompt, completion = render(tok, e.messages, e.prompt, e.target, f"task example {e.key}")
    return Pair(prompt, completion, _identities(e.messages, _last_user(e.messages), e.prompt), e.key)


def read_pairs(cfg, task, tok) -> list[Pair]:
    """Every row of model.sft.data as Pairs, in file (or split) order."""
    sft = cfg.model.sft
    if sft.data == "task":
        return [_example_pair(e, tok) for e in task.train]
    template = sft.prompt_template or cfg.task.prompt_template
    return [_row_pair(row, i, sft, template, cfg.model.chat_prompts, tok, sft.data)
            for i, row in enumerate(read_rows(sft.data))]


def held_out_ids(cfg, task) -> set[str]:
    """Every held-out question of the RL run as question_text, in every form (and a file task's raw ones)."""
    ids: set[str] = set()
    for e in task.eval + [e for ex in task.eval_sets.values() for e in ex]:
        ids |= _identities(e.prompt, e.messages, e.messages and _last_user(e.messages))
    if cfg.task.name in FILE_TASKS:
        ids |= held_out_questions(cfg.task)
    return ids


def drop_held_out(pairs: list[Pair], held: set[str], data: str, log) -> list[Pair]:
    """The pairs whose question is not held out (GSM8K's train.jsonl holds task.holdout's slice); none: refused."""
    kept = [p for p in pairs if not (p.ids & held)]
    if len(kept) < len(pairs):
        log(f"[sft] dropped {len(pairs) - len(kept)} of {len(pairs)} SFT rows whose question is held out by the task "
            f"(task.holdout / task.eval_path / task.eval): SFT never trains on the RL run's evaluation")
    if not kept:
        raise ValueError(f"model.sft.data={data}: every one of its {len(pairs)} rows is a held-out question of the "
                         f"task (task.holdout / task.eval_path / task.eval), so SFT would train on the evaluation; "
                         f"point it at training rows")
    return kept


def check_disjoint(pairs: list[Pair], held: set[str]) -> None:
    """No SFT row, trained on or held out for the SFT loss, asks a held-out question (by question text)."""
    bad = [p for p in pairs if p.ids & held]
    if bad:
        raise RuntimeError(f"SFT data holds {len(bad)} held-out question(s) of the task, e.g. {bad[0].prompt[-120:]!r}")


def split_eval(pairs: list[Pair], frac: float, seed: int) -> tuple[list[Pair], list[Pair]]:
    """(train, SFT held-out) split by prompt (smallest sha256(seed, prompt)): no question on both sides."""
    if frac <= 0:
        return pairs, []
    distinct = sorted({p.prompt for p in pairs}, key=lambda t: hashlib.sha256(f"sft{seed}:{t}".encode()).hexdigest())
    n = math.ceil(frac * len(distinct))
    if n >= len(distinct):
        raise ValueError(f"model.sft.eval_frac={frac} holds out all {len(distinct)} distinct SFT prompts; lower it "
                         f"or add rows (model.sft.n)")
    held = set(distinct[:n])
    return [p for p in pairs if p.prompt not in held], [p for p in pairs if p.prompt in held]


def exclude_from_rl(task, used: list[Pair], log) -> None:
    """Take the SFT problems out of RL's training split: by example key (data=task), else by question text."""
    keys = {p.key for p in used if p.key is not None}
    ids = set().union(*(p.ids for p in used))

    def used_by_sft(e) -> bool:
        return e.key in keys or bool(_identities(e.prompt, e.messages, e.messages and _last_user(e.messages)) & ids)

    before = len(task.train)
    task.train = [e for e in task.train if not used_by_sft(e)]
    if not task.train:
        raise ValueError(f"model.sft.exclude_from_rl=true takes all {before} RL training problems out (the SFT stage "
                         f"uses every one); set model.sft.n (SFT on the first n, RL on the rest) or "
                         f"model.sft.exclude_from_rl=false")
    log(f"[sft] RL trains on {len(task.train)} of {before} training problems: the {before - len(task.train)} the SFT "
        f"stage used are excluded (model.sft.exclude_from_rl)")


def fingerprint(pairs: list[Pair]) -> str:
    """A digest of the rows as rendered (what the cache record keeps to show what was trained on)."""
    h = hashlib.sha256()
    for p in pairs:
        h.update(json.dumps([p.prompt, p.completion]).encode())
    return h.hexdigest()[:16]

