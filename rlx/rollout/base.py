"""The rollout backend interface: the loop talks to this, never to HF generate or vLLM directly."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class RolloutBatch:
    """G completions for each of B prompts, flattened to N = B*G rows (prompt-major: row i is prompt i // G)."""

    prompt_ids: torch.Tensor  # [N, P] left-padded prompt tokens
    prompt_mask: torch.Tensor  # [N, P] 1 on real prompt tokens
    completion_ids: torch.Tensor  # [N, T] right-padded completion tokens (eos included when emitted)
    completion_mask: torch.Tensor  # [N, T] 1 on completion tokens up to and including eos
    logprobs: torch.Tensor  # [N, T] log-probs of the sampled tokens under the sampling policy (0 on padding)
    truncated: torch.Tensor  # [N] bool: hit max_new_tokens without eos
    group: torch.Tensor  # [N] long: index of the prompt each row belongs to
    texts: list[str] = field(default_factory=list)  # decoded completions (eos stripped)
    entropy: torch.Tensor | None = None  # [N, T] token entropy of the sampling distribution

    @property
    def input_ids(self) -> torch.Tensor:  # [N, P+T]
        return torch.cat([self.prompt_ids, self.completion_ids], dim=1)

    @property
    def attention_mask(self) -> torch.Tensor:  # [N, P+T]
        return torch.cat([self.prompt_mask, self.completion_mask], dim=1)

    @property
    def lengths(self) -> torch.Tensor:  # [N]
        return self.completion_mask.sum(1)

    def __len__(self) -> int:
        return self.completion_ids.shape[0]

    def select(self, rows: torch.Tensor) -> "RolloutBatch":
        """Keep the given rows (a bool mask or index tensor); `group` keeps its original prompt ids."""
        idx = rows.nonzero(as_tuple=True)[0] if rows.dtype == torch.bool else rows
        pick = lambda t: None if t is None else t[idx]  # noqa: E731
        return RolloutBatch(
            prompt_ids=self.prompt_ids[idx],
            prompt_mask=self.prompt_mask[idx],
            completion_ids=self.completion_ids[idx],
            completion_mask=self.completion_mask[idx],
            logprobs=self.logprobs[idx],
            truncated=self.truncated[idx],
            group=self.group[idx],
            texts=[self.texts[i] for i in idx.tolist()] if self.texts else [],
            entropy=pick(self.entropy),
        )


    @classmethod
    def concat(cls, batches: list["RolloutBatch"], pad_id: int = 0) -> "RolloutBatch":
        """Stack batches row-wise: prompts left-padded, completions right-padded to the longest
        (padded positions are masked out; `pad_id` only fills the token tensors)."""
        if len(batches) == 1:
            return batches[0]
        T = max(b.completion_ids.shape[1] for b in batches)
        P = max(b.prompt_ids.shape[1] for b in batches)
        rpad = lambda t, v: torch.nn.functional.pad(t, (0, T - t.shape[1]), value=v)  # noqa: E731
        lpad = lambda t, v: torch.nn.functional.pad(t, (P - t.shape[1], 0), value=v)  # noqa: E731
        return cls(
            prompt_ids=torch.cat([lpad(b.prompt_ids, pad_id) for b in batches]),
            prompt_mask=torch.cat([lpad(b.prompt_mask, 0) for b in batches]),
            completion_ids=torch.cat([rpad(b.completion_ids, pad_id) for b in batches]),
            completion_mask=torch.cat([rpad(b.completion_mask, 0) for b in batches]),
            logprobs=torch.cat([rpad(b.logprobs, 0.0) for b in batches]),
            truncated=torch.cat([b.truncated for b in batches]),
            group=torch.cat([b.group for b in batches]),
            texts=sum((b.texts for b in batches), []),
            entropy=None if any(b.entropy is None for b in batches) else torch.cat([rpad(b.entropy, 0.0) for b in batches]),
        )


class RolloutBackend:
    """Generates G sampled completions per prompt. Subclasses register under a short name."""

    def generate(self, model, prompts: list[str], group_size: int, generator: torch.Generator | None = None) -> RolloutBatch:
        raise NotImplementedError

    def sync_weights(self, model) -> None:
        """Push the current policy weights to the engine (no-op for in-process HF generation)."""
