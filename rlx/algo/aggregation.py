"""Loss aggregation as per-token weights computed once on the FULL rollout batch: sum(weights * per_token_loss)
over any split of the rows into micro-batches gives the same loss and gradient."""

from __future__ import annotations

from typing import Callable

from torch import Tensor

from rlx.algo.advantages import group_index, group_sum
from rlx.algo.config import AlgoConfig


def _sample(mask: Tensor, group: Tensor, max_new_tokens: int) -> Tensor:
    # mean over sequences of each sequence's token mean: / (N * len_i)
    lengths = mask.sum(-1, keepdim=True).clamp(min=1)  # [N, 1]
    return mask / (mask.shape[0] * lengths)


def _prompt(mask: Tensor, group: Tensor, max_new_tokens: int) -> Tensor:
    # ScaleRL: mean over prompts of each prompt's token mean: / (num_prompts * tokens of the prompt's group)
    index, num_prompts = group_index(group)
    prompt_tokens = group_sum(mask.sum(-1), index, num_prompts).clamp(min=1)  # [P]
    return mask / (num_prompts * prompt_tokens[index].unsqueeze(-1))


def _constant(mask: Tensor, group: Tensor, max_new_tokens: int) -> Tensor:
    # Dr.GRPO: / (N * max_new_tokens), independent of the completion lengths
    if max_new_tokens <= 0:
        raise ValueError(f"constant aggregation needs max_new_tokens > 0, got {max_new_tokens}")
    return mask / (mask.shape[0] * max_new_tokens)


AGGREGATIONS: dict[str, Callable[[Tensor, Tensor, int], Tensor]] = {
    "token": lambda mask, group, max_new_tokens: mask / mask.sum().clamp(min=1),  # every completion token counts once
    "sample": _sample,
    "prompt": _prompt,
    "constant": _constant,
}


def token_weights(mask: Tensor, group: Tensor, cfg: AlgoConfig, max_new_tokens: int) -> Tensor:
    """Per-token loss weights [N, T] for cfg.aggregation; zero where mask is zero."""
    if mask.dim() != 2 or group.shape != mask.shape[:1]:
        raise ValueError(f"mask must be [N, T] and group [N]; got {tuple(mask.shape)} and {tuple(group.shape)}")
    return AGGREGATIONS[cfg.aggregation](mask.float(), group, max_new_tokens)
