"""The KV cache sized to the work (rlx.rollout.kv_sizing) and evaluation handing the engine whole calls
(rlx.eval.evaluate.generate_texts). No model, no vLLM: hand-computed numbers and fake engines."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
import torch
from omegaconf import OmegaConf

from rlx.rollout import kv_sizing as K
from rlx.rollout.config import RolloutConfig

GiB = 1 << 30
# SmolLM2-135M-Instruct's config.json (the fields the rule reads)
SMOLLM2 = {"num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64,
           "hidden_size": 576}


def test_kv_bytes_per_token_is_layers_kv_heads_head_dim_k_and_v_dtype():
    # 30 layers x 3 kv heads x 64 x 2 (K, V) x 4 B = 46,080 B per token in fp32 (the issue's ~46 KB), half in bf16
    assert K.kv_bytes_per_token(SMOLLM2, 4) == 46_080
    assert K.kv_bytes_per_token(SMOLLM2, 2) == 23_040
    # no head_dim / num_key_value_heads: hidden / heads, and every head has its own K and V (MHA)
    assert K.kv_bytes_per_token({"num_hidden_layers": 4, "num_attention_heads": 4, "hidden_size": 128}, 4) == 4 * 4 * 32 * 2 * 4


def test_the_size_is_batch_x_prompt_plus_budget_x_bytes_per_token():
    # 200 GSM8K questions, the longest prompt 150 tokens + a 512-token budget = 662 -> 768 in 128-token blocks;
    # 200 x 768 x 46,080 B = 7,077,888,000 B (6.59 GiB), under the cap of 64 GiB free (32 GiB)
    plan = K.plan_kv_cache(0.0, 200, 662, 46_080, max_num_seqs=256, available=64 * GiB)
    assert plan.seq_tokens == 768 and plan.per_sequence == 768 * 46_080 == 35_389_440
    assert plan.wanted == plan.bytes == 200 * 35_389_440 == 7_077_888_000
    assert plan.concurrency == 200 and not plan.explicit
    assert "200 sequences x 768 tokens x 46080 B/token" in plan.describe() and "200 in flight" in plan.describe()
    # a 16-sample training group (4 prompts x 4) with no evaluation beyond it: 16 x 35,389,440 B = 566,231,040 B
    assert K.plan_kv_cache(0.0, 16, 662, 46_080, 256, available=64 * GiB).bytes == 566_231_040


def test_free_memory_caps_the_size():
    # 8 GiB available: the cap is min(half = 4 GiB, 8 - 2 GiB reserve = 6 GiB) = 4 GiB = 4,294,967,296 B;
    # it holds 4,294,967,296 // 35,389,440 = 121 sequences of 768 tokens
    plan = K.plan_kv_cache(0.0, 200, 662, 46_080, 256, available=8 * GiB)
    assert plan.cap == plan.bytes == 4 * GiB and plan.wanted == 7_077_888_000
    assert plan.concurrency == 121 and "capped by free memory" in plan.describe()
    # 3 GiB available: min(1.5 GiB, 3 - 2 = 1 GiB) = 1 GiB -> 30 sequences
    assert K.plan_kv_cache(0.0, 200, 662, 46_080, 256, available=3 * GiB).bytes == GiB
    assert K.memory_cap(3 * GiB) == GiB and K.memory_cap(GiB) == 0


def test_an_explicit_size_wins_over_the_rule_and_the_cap():
    # kv_cache_gb=1: 1,073,741,824 B whatever the work (wanted 7.08e9) or the memory (cap 1 GiB at 3 GiB free);
    # 1,073,741,824 // 35,389,440 = 30 sequences at once
    plan = K.plan_kv_cache(1.0, 200, 662, 46_080, 256, available=3 * GiB)
    assert plan.explicit and plan.bytes == GiB and plan.concurrency == 30
    assert K.plan_kv_cache(4.0, 1, 662, 46_080, 256, available=0).bytes == 4 * GiB  # beyond the cap too


def test_a_cache_that_holds_no_sequence_is_refused_naming_both_numbers():
    # explicit: 0.01 GiB = 10,737,418 B against one sequence of 768 x 46,080 = 35,389,440 B
    with pytest.raises(ValueError, match=r"kv_cache_gb=0.01 .*10737418 bytes.*cannot hold one sequence.*35389440 bytes"):
        K.plan_kv_cache(0.01, 200, 662, 46_080, 256, available=64 * GiB)
    # by the rule: 2 GiB + 20 MiB free leaves a cap of 20 MiB = 20,971,520 B < 35,389,440 B
    with pytest.raises(ValueError, match=r"free memory allows.*20971520 bytes.*cannot hold one sequence.*35389440 bytes"):
        K.plan_kv_cache(0.0, 200, 662, 46_080, 256, available=2 * GiB + 20 * (1 << 20))


def _rollout(**kw):
    return OmegaConf.structured(RolloutConfig(**kw))


def test_the_batch_is_what_the_schedule_submits_at_most_max_num_seqs():
    r = _rollout(prompts_per_step=4, group_size=4, eval_chunk=8)
    r.vllm.max_num_seqs = 256
    assert K.planned_batch(r) == 16  # training's 4 x 4 beats evaluation's 8-row calls
    r.eval_chunk = 0  # evaluation hands vLLM every row; it runs max_num_seqs at once
    assert K.planned_batch(r) == 256
    r.vllm.max_num_seqs, r.prompts_per_step, r.group_size = 64, 32, 8  # 256 rows, 64 at once
    assert K.planned_batch(r) == 64


def test_the_sequence_is_the_longest_prompt_plus_the_budget():
    r = _rollout(max_new_tokens=512)
    # the engine is given max_len = 2 x 150 + 512 = 812 (rlx.rollout.max_sequence_len): 150 + 512 = 662
    assert K.sequence_tokens(r, 812, 8192) == 662
    assert K.sequence_tokens(r, 812, 600) == 600  # never more than the context
    assert K.sequence_tokens(r, None, 1024) == 1024  # no max_len: the whole context
    r.eval_max_new_tokens = 1024  # evaluation's larger budget counts: 2 x 150 + 1024 = 1324 -> 150 + 1024
    assert K.sequence_tokens(r, 1324, 8192) == 1174
    r.interrupt.enabled, r.interrupt.answer_tokens = True, 8  # phrase tokens need the tokenizer; answer tokens count
    assert K.completion_budget(r) == 1024  # evaluation's 1024 still beats training's 512 + 8
    r.eval_max_new_tokens = None
    assert K.completion_budget(r) == 520


def test_servers_split_the_batch_and_the_free_memory():
    # 2 servers, 200 rows: 100 each, 100 x 35,389,440 = 3,538,944,000 B; with 8 GiB free each gets 4 GiB / 2
    plan = K.plan_kv_cache(0.0, 200, 662, 46_080, 256, available=64 * GiB, shares=2)
    assert plan.batch == 100 and plan.bytes == 3_538_944_000
    assert K.plan_kv_cache(0.0, 200, 662, 46_080, 256, available=8 * GiB, shares=2).bytes == 2 * GiB
    assert K.plan_kv_cache(1.0, 200, 662, 46_080, 256, available=8 * GiB, shares=2).bytes == GiB  # per server


def test_plan_for_engine_reads_the_model_config(tmp_path):
    import json

    (tmp_path / "config.json").write_text(json.dumps(SMOLLM2))
    r = _rollout(max_new_tokens=512, prompts_per_step=4, group_size=4, eval_chunk=16)
    plan = K.plan_for_engine(r, tmp_path, 4, max_len=812, max_model_len=8192, available=64 * GiB)
    assert (plan.batch, plan.seq_tokens, plan.per_token, plan.bytes) == (16, 768, 46_080, 566_231_040)


def test_a_server_gets_the_planned_bytes_on_its_command_line():
    from rlx.rollout.server.pool import server_command

    cmd = server_command("/m", 8000, lora_rank=None, max_model_len=812, dtype="float32", seed=0,
                         max_num_seqs=200, kv_cache_bytes=7_077_888_000, max_num_batched_tokens=8192)
    assert cmd[cmd.index("--kv-cache-memory-bytes") + 1] == "7077888000"
    assert cmd[cmd.index("--max-num-batched-tokens") + 1] == "8192"
    old = server_command("/m", 8000, lora_rank=None, max_model_len=64, dtype="float32", seed=0,
                         max_num_seqs=4, kv_cache_gb=0.25)  # an explicit GiB figure, as before
    assert old[old.index("--kv-cache-memory-bytes") + 1] == str(GiB // 4) and "--max-num-batched-tokens" not in old


def test_an_explicit_size_too_small_for_the_budget_is_refused_before_any_model():
    # the tiny model (4 layers, 2 kv heads, head_dim 128 / 4 = 32): 4 x 2 x 32 x 2 x 4 = 2,048 B/token; the budget
    # 512 + 1 prompt token -> one 128-token block is not enough: 640 tokens x 2,048 = 1,310,720 B > 0.001 GiB
    from rlx.config import RLXConfig

    cfg = OmegaConf.structured(RLXConfig)
    cfg.rollout.max_new_tokens = 512
    cfg.rollout.vllm.kv_cache_gb = 0.001  # 1,073,741 B
    with pytest.raises(ValueError, match=re.escape("1073741 bytes") + ".*" + re.escape("1310720 bytes")):
        K.check_explicit(cfg)
    cfg.rollout.vllm.kv_cache_gb = 0.0  # sized to the work: nothing to check before the prompts are known
    K.check_explicit(cfg)


# ---- evaluation hands the engine whole calls -------------------------------------------------------------
class _Batch(list):
    """What generate_texts reads of a RolloutBatch: len, texts, completion_mask."""


class _Recording:
    """A fake engine that records the rows of every generate call."""

    def __init__(self, concurrency: int = 0):
        self.calls: list[int] = []
        if concurrency:
            self.concurrency = concurrency

    def generate(self, prompts, n, sp, generator, seeds=None):
        self.calls.append(len(prompts) * n)
        b = _Batch([f"{s}" for s in seeds])
        b.texts, b.completion_mask = list(b), torch.ones(len(prompts), 3)
        self.report(len(prompts))
        return b

    def report(self, rows):
        pass


class _Reporting(_Recording):
    """Like the vLLM engines: it reports each finished row itself (on_finished)."""

    on_finished = None

    def report(self, rows):
        for _ in range(rows):
            self.on_finished(1, 3)


def _progress(total):
    from rlx.eval.evaluate import EvalProgress

    return EvalProgress(total, "[test]", show=False)


def _generate(engine, rows, fixed=False, chunk=256, clock=None, monkeypatch=None):
    from rlx.eval import evaluate as E

    if clock is not None:
        ticks = iter(clock)
        monkeypatch.setattr(E.time, "monotonic", lambda: float(next(ticks)))
    sp = SimpleNamespace()
    progress = _progress(rows)
    texts = E.generate_texts(engine, [f"q{i}" for i in range(rows)], 1, sp, list(range(rows)), chunk, progress, fixed)
    assert texts == [str(i) for i in range(rows)]  # every row once, in order
    return progress


def test_evaluation_hands_a_reporting_engine_every_row_in_one_call(monkeypatch):
    engine = _Reporting(concurrency=200)
    # a slow clock (each call seems to take 100 s) would make speed-sized calls of 16: the engine still gets all 500
    progress = _generate(engine, 500, clock=range(0, 10_000, 100), monkeypatch=monkeypatch)
    assert engine.calls == [500]
    assert (progress.done, progress.tokens) == (500, 1500)  # progress came from the engine, row by row
    assert engine.on_finished is None  # the hook is removed after the pass


def test_evaluation_never_calls_an_engine_with_fewer_rows_than_it_runs_at_once(monkeypatch):
    # a slow clock: by speed alone the calls would shrink to FIRST_CHUNK // 2 = 16 rows (the 16-row steps of the
    # issue); the engine's KV cache holds 120 at once, so every call but the last has 120
    from rlx.eval.evaluate import FIRST_CHUNK

    engine = _Recording(concurrency=120)
    progress = _generate(engine, 500, clock=range(0, 10_000, 100), monkeypatch=monkeypatch)
    assert engine.calls == [120, 120, 120, 120, 20] and progress.done == 500
    plain = _Recording()  # no concurrency known (the hf engine): sized by speed as before
    _generate(plain, 100, clock=range(0, 10_000, 100), monkeypatch=monkeypatch)
    assert plain.calls[0] == FIRST_CHUNK and plain.calls[1] == FIRST_CHUNK // 2


def test_a_fixed_chunk_is_kept_even_for_a_reporting_engine():
    # rollout.eval_chunk=N (or N ranks, which must make the same calls): exactly N rows a call
    engine = _Reporting(concurrency=200)
    progress = _generate(engine, 50, fixed=True, chunk=20)
    assert engine.calls == [20, 20, 10] and progress.done == 50
