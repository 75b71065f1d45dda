"""Shared fixtures for the algo tests: random rollout batches and a driver for TRL's own GRPO loss code."""

from __future__ import annotations

import contextlib
from collections import defaultdict
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
import torch
from torch import nn


@dataclass
class RandomBatch:
    logp: torch.Tensor  # [N, T] current policy log-probs
    old_logp: torch.Tensor  # [N, T]
    ref_logp: torch.Tensor  # [N, T]
    adv: torch.Tensor  # [N]
    mask: torch.Tensor  # [N, T] float, right-padded
    group: torch.Tensor  # [N] long


def make_batch(n: int = 8, t: int = 7, group_size: int = 4, seed: int = 0, dtype=torch.float32) -> RandomBatch:
    """Random log-probs with per-row drift scales so that some tokens/sequences clip and some do not."""
    g = torch.Generator().manual_seed(seed)
    logp = -3.0 * torch.rand(n, t, generator=g, dtype=dtype)
    scales = torch.tensor([0.0, 1e-4, 1e-2, 0.3, 0.6], dtype=dtype)
    drift = scales[torch.arange(n) % len(scales)].unsqueeze(-1)  # [N, 1]
    old_logp = logp + drift * torch.randn(n, t, generator=g, dtype=dtype)
    ref_logp = logp + 0.3 * torch.randn(n, t, generator=g, dtype=dtype)
    adv = torch.randn(n, generator=g, dtype=dtype)
    lengths = torch.randint(1, t + 1, (n,), generator=g)
    lengths[0] = t
    mask = (torch.arange(t).unsqueeze(0) < lengths.unsqueeze(-1)).to(dtype)
    group = torch.arange(n) // group_size
    return RandomBatch(logp, old_logp, ref_logp, adv, mask, group)


class _LogpTable(nn.Module):
    """Tiny 'model' for TRL: each row's per-position log-probs are a parameter; row id = input_ids[:, 0]."""

    def __init__(self, table: torch.Tensor) -> None:
        super().__init__()
        self.table = nn.Parameter(table.clone())  # [N, P + T]

    def forward(self, input_ids, attention_mask=None, labels=None, fused_lm_head=False, **_):
        logps = self.table[input_ids[:, 0]]
        return SimpleNamespace(log_probs=logps, entropy=torch.zeros_like(logps).detach(), aux_loss=None)


class _SingleProcessAccelerator:
    num_processes = 1
    is_main_process = True

    def gather(self, x):
        return x

    gather_for_metrics = gather

    def reduce(self, x, reduction="sum"):
        return x

    def autocast(self):
        return contextlib.nullcontext()


PROMPT_LEN = 2


def trl_loss(
    batch: RandomBatch,
    *,
    loss_type: str,
    epsilon: float,
    epsilon_high: float,
    beta: float,
    sequence_level: bool = False,
    bias_correction_kl: bool = True,
    max_completion_length: int | None = None,
    micro_batches: int = 1,
):
    """Run TRL 1.16 GRPOTrainer._compute_loss on `batch`, split into `micro_batches` gradient-accumulation steps.

    Returns (summed loss, grad w.r.t. the completion log-probs [N, T], metrics of the last call).
    """
    from trl import GRPOConfig, GRPOTrainer

    n, t = batch.logp.shape
    args = GRPOConfig(
        output_dir="/tmp/rlx_algo_trl_test",
        report_to=[],
        use_cpu=True,
        loss_type=loss_type,
        epsilon=epsilon,
        epsilon_high=epsilon_high,
        beta=beta,
        importance_sampling_level="sequence" if sequence_level else "token",
        use_bias_correction_kl=bias_correction_kl,
        max_completion_length=max_completion_length or t,
        gradient_accumulation_steps=micro_batches,
        steps_per_generation=micro_batches,
    )
    trainer = object.__new__(GRPOTrainer)  # skip __init__: set exactly the state _compute_loss reads
    table = torch.cat([torch.zeros(n, PROMPT_LEN, dtype=batch.logp.dtype), batch.logp], dim=1)
    model = _LogpTable(table)
    trainer.__dict__.update(
        args=args,
        model=model,
        accelerator=_SingleProcessAccelerator(),
        loss_type=loss_type,
        epsilon_low=epsilon,
        epsilon_high=epsilon_high,
        beta=beta,
        importance_sampling_level=args.importance_sampling_level,
        top_entropy_quantile=1.0,
        off_policy_mask_threshold=None,
        use_vllm=False,
        vllm_importance_sampling_correction=False,
        max_completion_length=args.max_completion_length,
        aux_loss_enabled=False,
        _entropy_bonus_enabled=False,
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
        current_gradient_accumulation_steps=micro_batches,
    )
    model.train()
    rows = torch.arange(n)
    total = torch.zeros((), dtype=batch.logp.dtype)
    for chunk in rows.chunk(micro_batches):
        prompt_ids = torch.zeros(len(chunk), PROMPT_LEN, dtype=torch.long)
        prompt_ids[:, 0] = chunk
        inputs = {
            "prompt_ids": prompt_ids,
            "prompt_mask": torch.ones(len(chunk), PROMPT_LEN, dtype=torch.long),
            "completion_ids": torch.zeros(len(chunk), t, dtype=torch.long),
            "completion_mask": batch.mask[chunk].long(),
            "advantages": batch.adv[chunk],
            "old_per_token_logps": batch.old_logp[chunk],
            "ref_per_token_logps": batch.ref_logp[chunk],
            "num_items_in_batch": batch.mask.sum(),  # spans the whole generation batch, as TRL passes it
        }
        loss = trainer._compute_loss(model, inputs)
        loss.backward()
        total = total + loss.detach()
    metrics = {k: v[-1] for k, v in trainer._metrics["train"].items()}
    return total, model.table.grad[:, PROMPT_LEN:].clone(), metrics


@pytest.fixture(scope="session")
def make_random_batch():
    """Factory for RandomBatch (fixtures rather than imports: test dirs share the module name `conftest`)."""
    return make_batch


@pytest.fixture(scope="session")
def run_trl_loss():
    """TRL's own loss code as a function; skips when TRL (a test-only dependency) is missing."""
    pytest.importorskip("trl", minversion="1.16")
    return trl_loss
