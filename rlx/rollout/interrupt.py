"""ScaleRL's forced length interruption (`rollout.interrupt`; docs/offpolicy.md): a completion at its budget gets the
phrase and `answer_tokens` more; the phrase was not sampled, so it is `forced` and never enters the loss."""

from __future__ import annotations

import torch

from rlx.rollout.base import RolloutBatch, RolloutEngine, SamplingParams


def phrase_ids(tok, phrase: str) -> list[int]:
    """The phrase as token ids; refuses a phrase the tokenizer cannot write (unknown tokens)."""
    ids = tok(phrase, add_special_tokens=False).input_ids
    if not ids:
        raise ValueError("rollout.interrupt.phrase is empty")
    if tok.unk_token_id is not None and tok.unk_token_id in ids:
        raise ValueError(f"rollout.interrupt.phrase {phrase!r} has characters the model's tokenizer cannot write")
    return ids


def interrupt_and_answer(engine: RolloutEngine, batch: RolloutBatch, sampling: SamplingParams,
                         generator: torch.Generator, phrase: list[int], answer_tokens: int) -> RolloutBatch:
    """Rows of `batch` that hit the budget -> prompt + completion + phrase, continued for answer_tokens."""
    N = len(batch)
    batch.interrupted = batch.truncated.clone()  # [N] bool
    rows = batch.interrupted.nonzero(as_tuple=True)[0].tolist()
    if not rows:
        return batch
    lens = batch.lengths.tolist()
    ctx = [batch.prompt_ids[r][batch.prompt_mask[r].bool()].tolist() + batch.completion_ids[r, : lens[r]].tolist() + phrase
           for r in rows]
    cont = engine.generate(ctx, 1, sampling.but(max_tokens=answer_tokens), generator)  # [len(rows), Ta]
    L = len(phrase)
    T = max(batch.completion_ids.shape[1], max(lens[r] + L + int(cont.lengths[j]) for j, r in enumerate(rows)))
    grow = lambda t, v: torch.nn.functional.pad(t, (0, T - t.shape[1]), value=v)  # noqa: E731
    comp, cmask = grow(batch.completion_ids, 0), grow(batch.completion_mask, 0)  # [N, T]
    logp = grow(batch.logprobs, 0.0)
    ent = grow(batch.entropy, 0.0) if batch.entropy is not None and cont.entropy is not None else None
    tver = grow(batch.token_version, -1) if batch.token_version is not None else None
    forced = torch.zeros((N, T), dtype=torch.bool) if batch.forced is None else grow(batch.forced, False)
    truncated, texts = batch.truncated.clone(), list(batch.texts)
    phrase_t = torch.tensor(phrase, dtype=torch.long)
    for j, r in enumerate(rows):
        a, b, c = lens[r], lens[r] + L, lens[r] + L + int(cont.lengths[j])
        comp[r, a:b], comp[r, b:c] = phrase_t, cont.completion_ids[j, : c - b]
        cmask[r, a:c] = 1
        forced[r, a:b] = True
        logp[r, a:b], logp[r, b:c] = 0.0, cont.logprobs[j, : c - b]
        if ent is not None:
            ent[r, a:b], ent[r, b:c] = 0.0, cont.entropy[j, : c - b]
        if tver is not None:
            v = cont.token_version[j, : c - b] if cont.token_version is not None else torch.full((c - b,), -1)
            tver[r, a:b], tver[r, b:c] = v[0], v
        truncated[r] = cont.truncated[j]
        texts[r] = cont.texts[j]  # the reward scores the answer written after the phrase
    return RolloutBatch(batch.prompt_ids, batch.prompt_mask, comp, cmask, logp, truncated, batch.group, texts, ent,
                        version=batch.version, token_version=tver, forced=forced, interrupted=batch.interrupted)
