"""Token ids, completion-only loss masks and token-budget batches of the SFT stage: whole rows of similar length,
not packing, which would need variable-length attention kernels the CPU lacks (docs/models.md)."""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Encoded:
    prompt: list[int]
    completion: list[int]  # ends with eos: the policy learns to stop

    def __len__(self) -> int:
        return len(self.prompt) + len(self.completion)


def encode(tok, prompt: str, completion: str) -> Encoded:
    """Prompt and completion tokenized apart, as generation sees them; the completion ends at its first eos."""
    eos = tok.eos_token
    if eos and eos in completion:
        completion = completion[: completion.index(eos)]
    ids = tok(completion, add_special_tokens=False).input_ids
    return Encoded(tok(prompt, add_special_tokens=False).input_ids, ids + [tok.eos_token_id])


def plan(lengths: list[int], batch_tokens: int, rng: random.Random | None) -> list[list[int]]:
    """Row indices in batches of len * longest <= batch_tokens, by length (`rng`: ties and order shuffled)."""
    order = list(range(len(lengths)))
    if rng is not None:
        rng.shuffle(order)
    order.sort(key=lambda i: -lengths[i])  # stable: ties keep the shuffle
    batches, cur, longest = [], [], 0
    for i in order:
        if cur and max(longest, lengths[i]) * (len(cur) + 1) > batch_tokens:
            batches.append(cur)
            cur, longest = [], 0
        cur.append(i)
        longest = max(longest, lengths[i])
    if cur:
        batches.append(cur)
    if rng is not None:
        rng.shuffle(batches)
    return batches


@dataclass
class Batch:
    ids: torch.Tensor  # [B, L] left-padded prompt + completion
    mask: torch.Tensor  # [B, L] attention mask
    loss_mask: torch.Tensor  # [B, T] 1 on completion tokens (the last T columns of ids), 0 on prompt / padding
    n_completion: int  # T: the longest completion of the batch


def collate(rows: list[Encoded], pad_id: int) -> Batch:
    """Rows right-aligned, so the last T columns hold each row's completion (shorter ones: prompt, masked out)."""
    L = max(len(r) for r in rows)
    T = max(len(r.completion) for r in rows)
    ids = torch.full((len(rows), L), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), L), dtype=torch.long)
    loss_mask = torch.zeros((len(rows), T))
    for b, r in enumerate(rows):
        ids[b, L - len(r):] = torch.tensor(r.prompt + r.completion)
        mask[b, L - len(r):] = 1
        loss_mask[b, T - len(r.completion):] = 1
    return Batch(ids, mask, loss_mask, T)
