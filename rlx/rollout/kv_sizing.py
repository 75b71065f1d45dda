"""The KV cache of a vLLM engine on CPU (colocated or a local server), sized to the work (docs/engine.md, "KV cache
and batch sized to the work"): vLLM's CPU backend allocates what it is given. min(batch x sequence x KV bytes per
token, a free-memory cap); an explicit rollout.vllm.kv_cache_gb wins; one that holds no sequence is refused."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

GiB = 1 << 30
BLOCK_TOKENS = 128  # vLLM's CPU KV block (vllm/platforms/cpu.py); a sequence holds whole blocks
FREE_SHARE = 0.5  # the cache takes at most this share of MemAvailable ...
FREE_RESERVE = 2 * GiB  # ... and leaves at least this much of it
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def kv_bytes_per_token(config: dict, dtype_bytes: int) -> int:
    """K and V of one token over every layer: layers x kv_heads x head_dim x 2 x dtype bytes (an HF config.json)."""
    heads = int(config["num_attention_heads"])
    kv_heads = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or int(config["hidden_size"]) // heads)
    return int(config["num_hidden_layers"]) * kv_heads * head_dim * 2 * int(dtype_bytes)


def model_config(base_dir) -> dict:
    return json.loads((Path(base_dir) / "config.json").read_text())


def mem_available() -> int:
    """Bytes the kernel says can be allocated without swapping (MemAvailable), psutil's figure elsewhere."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    import psutil

    return int(psutil.virtual_memory().available)


def memory_cap(available: int) -> int:
    """The most the KV cache may take of `available` free bytes."""
    return max(0, min(int(available * FREE_SHARE), available - FREE_RESERVE))


def completion_budget(rollout, tok=None) -> int:
    """The largest completion of any call: training (with an interruption's phrase and answer) or evaluation."""
    train = int(rollout.max_new_tokens)
    if rollout.interrupt.enabled:
        if tok is not None:
            from rlx.rollout.interrupt import phrase_ids

            train += len(phrase_ids(tok, rollout.interrupt.phrase))
        train += int(rollout.interrupt.answer_tokens)
    return max(train, int(rollout.eval_max_new_tokens or 0))


def sequence_tokens(rollout, max_len: int | None, max_model_len: int, tok=None) -> int:
    """The longest prompt + the budget, at most max_model_len; max_len is 2 x that prompt + the budget."""
    budget = completion_budget(rollout, tok)
    if max_len and max_len > budget:
        return min(max_model_len, budget + math.ceil((max_len - budget) / 2))
    return int(max_model_len)


def planned_batch(rollout) -> int:
    """Sequences the schedule hands the engine at once (training's or evaluation's), at most vLLM's max_num_seqs."""
    train = int(rollout.prompts_per_step) * int(rollout.group_size)
    evaluation = int(rollout.eval_chunk) or int(rollout.vllm.max_num_seqs)
    return max(1, min(int(rollout.vllm.max_num_seqs), max(train, evaluation)))


def _fmt(n: float) -> str:
    return f"{n / GiB:.3f} GiB" if n >= GiB / 8 else f"{n / (1 << 20):.1f} MiB"


@dataclass
class KVPlan:
    bytes: int  # the cache vLLM gets (kv_cache_memory_bytes / --kv-cache-memory-bytes)
    per_token: int  # KV bytes of one token
    seq_tokens: int  # tokens one sequence needs, rounded up to whole blocks
    batch: int  # sequences the schedule submits at once
    wanted: int  # batch x seq_tokens x per_token
    cap: int  # what free memory allows (0 when the size was explicit)
    available: int  # MemAvailable at sizing (0 when explicit)
    explicit: bool
    max_num_seqs: int

    @property
    def per_sequence(self) -> int:
        return self.seq_tokens * self.per_token

    @property
    def concurrency(self) -> int:
        """Sequences of seq_tokens the cache holds at once (vLLM never runs more than max_num_seqs)."""
        return min(self.max_num_seqs, self.bytes // self.per_sequence)

    def describe(self) -> str:
        how = ("rollout.vllm.kv_cache_gb (explicit)" if self.explicit else
               f"{self.batch} sequences x {self.seq_tokens} tokens x {self.per_token} B/token = {_fmt(self.wanted)}"
               f"{', capped by free memory: ' + _fmt(self.cap) + ' of ' + _fmt(self.available) + ' available' if self.wanted > self.cap else ''}")
        return (f"KV cache {_fmt(self.bytes)} ({how}): holds {self.bytes // self.per_sequence} sequences of "
                f"{self.seq_tokens} tokens at once; {self.concurrency} in flight (max_num_seqs {self.max_num_seqs})")


def _refuse_small(size: int, one: int, seq_tokens: int, per_token: int, what: str) -> None:
    if size < one:
        raise ValueError(f"{what} ({_fmt(size)}, {size} bytes) cannot hold one sequence: {seq_tokens} tokens (the longest "
                         f"prompt + the completion budget, in blocks of {BLOCK_TOKENS}) x {per_token} B/token = "
                         f"{_fmt(one)} ({one} bytes). Give more (rollout.vllm.kv_cache_gb), free memory, or shorten "
                         f"rollout.max_new_tokens / rollout.eval_max_new_tokens")


def plan_kv_cache(explicit_gb: float, batch: int, seq_tokens: int, per_token: int, max_num_seqs: int,
                  available: int | None = None, block: int = BLOCK_TOKENS, shares: int = 1) -> KVPlan:
    """The KV cache by the module's rule; `shares` > 1: one of that many local servers (split batch/memory)."""
    shares = max(1, int(shares))
    batch = min(int(max_num_seqs), math.ceil(int(batch) / shares))
    seq = math.ceil(max(1, seq_tokens) / block) * block
    one = seq * per_token
    wanted = batch * one
    if explicit_gb and explicit_gb > 0:
        size = int(explicit_gb * GiB)
        _refuse_small(size, one, seq, per_token, f"rollout.vllm.kv_cache_gb={explicit_gb:g}")
        return KVPlan(size, per_token, seq, int(batch), wanted, 0, 0, True, int(max_num_seqs))
    available = mem_available() if available is None else int(available)
    cap = memory_cap(available) // shares
    size = min(wanted, cap)
    _refuse_small(size, one, seq, per_token, f"the KV cache that free memory allows (half of MemAvailable "
                                             f"{_fmt(available)}, leaving at least {_fmt(FREE_RESERVE)}"
                                             f"{f', shared by {shares} servers' if shares > 1 else ''})")
    return KVPlan(size, per_token, seq, int(batch), wanted, cap, available, False, int(max_num_seqs))


def plan_for_engine(rollout, base_dir, dtype_bytes: int, max_len: int | None, max_model_len: int,
                    tok=None, available: int | None = None, shares: int = 1) -> KVPlan:
    """The plan of an engine being built, from its model's config.json and the run's max_len."""
    per_token = kv_bytes_per_token(model_config(base_dir), dtype_bytes)
    return plan_kv_cache(float(rollout.vllm.kv_cache_gb), planned_batch(rollout),
                         sequence_tokens(rollout, max_len, max_model_len, tok), per_token,
                         int(rollout.vllm.max_num_seqs), available, shares=shares)


def check_explicit(cfg) -> None:
    """Preflight: refuse an explicit rollout.vllm.kv_cache_gb that cannot hold the completion budget alone."""
    r = cfg.rollout
    if not float(r.vllm.kv_cache_gb) > 0:
        return
    m = cfg.model
    try:
        if m.source == "tiny":
            conf = {"num_hidden_layers": m.num_layers, "num_attention_heads": m.num_heads,
                    "num_key_value_heads": m.num_kv_heads, "hidden_size": m.hidden_size}
        else:
            from rlx.models import _hf_path

            conf = model_config(_hf_path(m))
    except (OSError, KeyError, ValueError, AttributeError):
        return  # not known before the model is built: the engine checks it when it is
    per_token = kv_bytes_per_token(conf, 2 if cfg.trainer.dtype == "bf16" else 4)
    plan_kv_cache(float(r.vllm.kv_cache_gb), 1, completion_budget(r) + 1, per_token, int(r.vllm.max_num_seqs))
