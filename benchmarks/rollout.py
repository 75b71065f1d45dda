"""Rollout-engine throughput, hf vs vllm: `python -m benchmarks.rollout [--sizes 1m,10m,100m] [--batches 16x8,2x4]`.

Both engines are driven through rlx's engine interface (`rlx.rollout.build_engine`, then
`engine.generate(prompts, n, SamplingParams, generator)`), exactly as the training loop drives them:

  hf    in-process transformers decode with a KV cache on the trainer's own PEFT policy
        (the LoRA adapters stay unmerged: every forward runs base + LoRA matmuls)
  vllm  vLLM colocated in this process (`LLM`, eager mode); its weights are the policy with the
        LoRA merged in, reloaded by `engine.sync`

  model     random-init Qwen2 (`--sizes`: 1m, 10m, 100m) with rlx's char tokenizer, saved to a temp
            dir (vLLM loads it from there), fp32, LoRA r 8 alpha 16 on all linear projections with
            a non-zero B (so the merge in vllm's `sync` changes every projection)
  no eos    a random model emits eos now and then, which would make the two engines generate
            different token counts. So the saved model never picks eos: a constant "bias channel"
            in the residual stream (embedding channel 0 = 1.0 for every token; row 0 of every
            o_proj and down_proj, and of their LoRA B, zeroed so no layer writes it), positive
            after the final RMSNorm, and the lm_head row of eos = -EOS_PUSH on that channel and 0
            elsewhere: the eos logit sits tens of nats below the others. Every completion runs to
            `--max-tokens`; the table reports the fraction that did (`full`). Compute per token
            does not depend on the weights' values.
  sampling  temperature 1, top_p 1, top_k 0, `--max-tokens` new tokens, the same on both engines;
            a fresh `torch.Generator().manual_seed(k)` for repeat k
  batches   `--batches` as PROMPTS x COMPLETIONS (default 16x8 = 128 sequences, the default RL batch,
            and 2x4 = 8 sequences); prompts are `a+b-c=`-style arithmetic strings
  schedule  per size: build both engines once (timed), time one `engine.sync(policy, 1)` each, then
            per batch one untimed warm-up generate per engine and `--repeats` timed generates
            alternating hf, vllm, hf, vllm, ...; both engines are closed before the next size
  measure   tokens/s = generated tokens (completion_mask sum) / wall seconds of `generate`
            (prompt encoding, prefill, decode, log-probs and building the RolloutBatch included)

Reported per (size, batch): the median tokens/s of each engine over the repeats, the ratio
vllm/hf of the medians (> 1 means vllm is faster) and each repeat's ratio. Written to `--out`
(outputs/bench/rollout.json) as well.

Threads: `--threads` is set with torch.set_num_threads before the first vLLM engine is built;
both engines share that one torch thread pool (rlx's vllm engine runs vLLM unpinned and keeps
torch.set_num_threads working, see rlx/rollout/vllm.py). On a
machine shared with other jobs use `--threads 1`: with 2 threads on a loaded 2-core machine the
hf engine ran tens of times slower (presumably OpenMP threads waiting on descheduled peers),
see docs/bench_rollout.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import torch

from benchmarks.common import work_dir

ENGINES = ("hf", "vllm")
# Qwen2 shapes; head_dim = hidden / heads is 32 or 64 (served by vLLM's CPU attention).
SIZES: dict[str, dict] = {
    "1m": dict(hidden_size=128, intermediate_size=512, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2),
    "10m": dict(hidden_size=256, intermediate_size=1024, num_hidden_layers=10, num_attention_heads=8, num_key_value_heads=4),
    "100m": dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12, num_key_value_heads=4),
}
LORA = SimpleNamespace(r=8, alpha=16, dropout=0.0,
                       target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
EOS_PUSH = 50.0  # lm_head[eos] = -EOS_PUSH * e_0; residual channel 0 is exactly 1.0 at the final norm
MAX_POSITIONS = 512
SEED = 0


# ---- model ---------------------------------------------------------------------------------------
def build_policy(size: str, path: Path, seed: int = SEED):
    """Random-init Qwen2 of `size` saved to `path` (what vLLM loads), wrapped with LoRA.

    Returns (policy, tokenizer, base parameter count)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from rlx.models import attach_lora
    from rlx.models.tokenizer import build_char_tokenizer

    tok = build_char_tokenizer()
    shape = SIZES[size]
    config = Qwen2Config(vocab_size=len(tok), max_position_embeddings=MAX_POSITIONS, tie_word_embeddings=False,
                         pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
                         eos_token_id=tok.eos_token_id, **shape)
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    with torch.no_grad():  # never eos: see the module docstring
        model.model.embed_tokens.weight[:, 0] = 1.0
        for layer in model.model.layers:  # no layer writes residual channel 0: it stays 1.0
            layer.self_attn.o_proj.weight[0] = 0.0
            layer.mlp.down_proj.weight[0] = 0.0
        model.lm_head.weight[tok.eos_token_id] = 0.0
        model.lm_head.weight[tok.eos_token_id, 0] = -EOS_PUSH
    n_params = sum(p.numel() for p in model.parameters())
    model.save_pretrained(path)
    tok.save_pretrained(path)
    policy = attach_lora(model.eval(), LORA)
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.02, generator=gen)
                if "o_proj" in name or "down_proj" in name:
                    p[0] = 0.0  # the adapters do not write channel 0 either
    return policy.eval(), tok, n_params


def make_prompts(count: int, seed: int = SEED) -> list[str]:
    rng = random.Random(seed)
    return [f"{rng.randint(0, 99)}+{rng.randint(0, 9)}-{rng.randint(0, 9)}=" for _ in range(count)]


def make_engine(name: str, policy, tok, path: Path, threads: int, kv_cache_gb: float, max_len: int):
    from omegaconf import OmegaConf

    from rlx.rollout.config import RolloutConfig
    from rlx.run.config import TrainerConfig
    from rlx.run.device import resolve
    from rlx.rollout import build_engine

    cfg = OmegaConf.merge(OmegaConf.structured(RolloutConfig),
                          {"engine": name, "vllm": {"kv_cache_gb": kv_cache_gb, "max_num_seqs": 256}})
    trainer = resolve(OmegaConf.structured(TrainerConfig(device="cpu", dtype="fp32", threads=threads)))
    return build_engine(cfg, tok, policy, trainer, base_dir=path, seed=SEED, max_len=max_len)


# ---- timing --------------------------------------------------------------------------------------
def timed_generate(engine, prompts, n, sampling, seed: int) -> dict:
    gen = torch.Generator().manual_seed(seed)
    start = time.perf_counter()
    batch = engine.generate(prompts, n, sampling, gen)
    wall = time.perf_counter() - start
    tokens = int(batch.completion_mask.sum())
    return {"wall_s": wall, "tokens": tokens, "tok_s": tokens / wall,
            "full": float((batch.lengths == sampling.max_tokens).float().mean())}


def parse_batches(spec: str) -> list[tuple[int, int]]:
    out = []
    for item in spec.split(","):
        item = item.strip().lower()
        if not item:
            continue
        p, _, g = item.partition("x")
        if not (p.isdigit() and g.isdigit()) or int(p) < 1 or int(g) < 1:
            raise ValueError(f"--batches: '{item}' is not PROMPTSxCOMPLETIONS (e.g. 16x8)")
        out.append((int(p), int(g)))
    return out


def parse_size_tokens(spec: str) -> dict[str, int]:
    out = {}
    for item in spec.split(","):
        if item.strip():
            size, _, t = item.partition("=")
            out[size.strip()] = int(t)
    return out


def bench_size(size: str, a, batches, max_tokens: int, work: Path, log=print) -> tuple[dict, list[dict]]:
    from rlx.rollout import SamplingParams

    path = work / f"model_{size}"
    policy, tok, n_params = build_policy(size, path)
    shape = SIZES[size]
    log(f"[model] {size}: {n_params:,} parameters (+ LoRA r {LORA.r}), head_dim "
        f"{shape['hidden_size'] // shape['num_attention_heads']}, {shape}")
    prompts_all = make_prompts(max(p for p, _ in batches))
    longest = max(len(p) for p in prompts_all)
    max_len = min(MAX_POSITIONS, -(-(longest + max_tokens + 1) // 16) * 16)
    sampling = SamplingParams(temperature=1.0, top_p=1.0, top_k=0, max_tokens=max_tokens)
    warm = sampling.but(max_tokens=min(max_tokens, 8))
    engines, info = {}, {"size": size, "params": n_params, "max_tokens": max_tokens, "build_s": {}, "sync_s": {}}
    rows = []
    try:
        for name in ENGINES:
            start = time.perf_counter()
            engines[name] = make_engine(name, policy, tok, path, a.threads, a.kv_cache_gb, max_len)
            info["build_s"][name] = time.perf_counter() - start
            start = time.perf_counter()
            engines[name].sync(policy, 1)
            info["sync_s"][name] = time.perf_counter() - start
        info["threads"] = torch.get_num_threads()
        log(f"[engines] {size}: build hf {info['build_s']['hf']:.2f}s vllm {info['build_s']['vllm']:.2f}s; "
            f"sync hf {info['sync_s']['hf'] * 1e3:.2f}ms vllm {info['sync_s']['vllm'] * 1e3:.1f}ms; "
            f"torch threads {info['threads']}")
        for P, G in batches:
            prompts = prompts_all[:P]
            for name in ENGINES:  # warm-up, untimed
                engines[name].generate(prompts, G, warm, torch.Generator().manual_seed(10_000))
            runs = {name: [] for name in ENGINES}
            for k in range(a.repeats):
                for name in ENGINES:
                    r = timed_generate(engines[name], prompts, G, sampling, seed=k)
                    runs[name].append(r)
                    log(f"[run] {size} {P}x{G} T={max_tokens} repeat {k} {name:4}: {r['tokens']} tokens in "
                        f"{r['wall_s']:.3f}s = {r['tok_s']:.0f} tok/s (full {r['full']:.2f})")
            med = {name: statistics.median(r["tok_s"] for r in runs[name]) for name in ENGINES}
            row = {
                "size": size, "params": n_params, "prompts": P, "completions": G, "seqs": P * G,
                "max_tokens": max_tokens, "threads": info["threads"],
                "hf_tok_s": med["hf"], "vllm_tok_s": med["vllm"], "ratio": med["vllm"] / med["hf"],
                "ratios": [v["tok_s"] / h["tok_s"] for h, v in zip(runs["hf"], runs["vllm"])],
                "full": {name: min(r["full"] for r in runs[name]) for name in ENGINES},
                "sync_s": dict(info["sync_s"]), "build_s": dict(info["build_s"]), "runs": runs,
            }
            rows.append(row)
    finally:
        for engine in engines.values():
            engine.close()
        engines.clear()
        del policy
    return info, rows


# ---- report --------------------------------------------------------------------------------------
def format_table(rows: list[dict]) -> str:
    head = ("| size | params | batch | seqs | T | hf tok/s | vllm tok/s | vllm/hf | vllm/hf per repeat | full hf/vllm "
            "| sync hf ms | sync vllm ms |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        lines.append("| " + " | ".join([
            r["size"], f"{r['params']:,}", f"{r['prompts']}x{r['completions']}", str(r["seqs"]), str(r["max_tokens"]),
            f"{r['hf_tok_s']:.0f}", f"{r['vllm_tok_s']:.0f}", f"{r['ratio']:.2f}",
            " ".join(f"{x:.2f}" for x in r["ratios"]), f"{r['full']['hf']:.2f}/{r['full']['vllm']:.2f}",
            f"{r['sync_s']['hf'] * 1e3:.2f}", f"{r['sync_s']['vllm'] * 1e3:.1f}",
        ]) + " |")
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="1m,10m,100m", help=f"comma list of {sorted(SIZES)}")
    p.add_argument("--batches", default="16x8,2x4", help="comma list of PROMPTSxCOMPLETIONS")
    p.add_argument("--max-tokens", type=int, default=64, help="new tokens per completion (no eos: all run to it)")
    p.add_argument("--size-max-tokens", default="", help="per-size override, e.g. 100m=32")
    p.add_argument("--repeats", type=int, default=3, help="timed generates per engine and batch (alternating)")
    p.add_argument("--threads", type=int, default=2, help="torch intra-op threads (set before vLLM starts)")
    p.add_argument("--kv-cache-gb", type=float, default=1.0, help="vLLM's CPU KV cache")
    p.add_argument("--out", default="outputs/bench/rollout.json")
    p.add_argument("--work-dir", default=None, help="keep the saved models here (default: a temp dir, removed)")
    return p


def main(argv: list[str] | None = None) -> dict:
    p = _parser()
    a = p.parse_args(argv)

    sizes = [s.strip() for s in a.sizes.split(",") if s.strip()]
    unknown = [s for s in sizes if s not in SIZES]
    if unknown:
        p.error(f"--sizes: unknown {unknown}; known {sorted(SIZES)}")
    try:
        batches = parse_batches(a.batches)
        size_tokens = parse_size_tokens(a.size_max_tokens)
    except ValueError as e:
        p.error(str(e))
    if not batches or a.repeats < 1 or a.max_tokens < 1 or a.threads < 1:
        p.error("need at least one batch, --repeats >= 1, --max-tokens >= 1, --threads >= 1")
    threads_before = torch.get_num_threads()
    torch.set_num_threads(a.threads)
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")

    import transformers

    from rlx.rollout.vllm_setup import import_vllm

    vllm = import_vllm()  # sets the colocation env first; fails here, not after the first model, without vLLM

    meta = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"), "machine": platform.machine(),
        "cpus": os.cpu_count(), "threads": a.threads, "torch": torch.__version__,
        "transformers": transformers.__version__, "vllm": getattr(vllm, "__version__", "?"), "dtype": "float32",
        "repeats": a.repeats, "lora_r": LORA.r, "lora_alpha": LORA.alpha, "temperature": 1.0, "top_p": 1.0,
        "eos_push": EOS_PUSH, "argv": sys.argv[1:] if argv is None else list(argv),
    }
    print(f"rollout bench: engines {'/'.join(ENGINES)}, fp32, LoRA r {LORA.r}, threads {a.threads}/{os.cpu_count()} "
          f"cpus, batches {a.batches}, T {a.max_tokens} {a.size_max_tokens}, {a.repeats} alternating repeats",
          flush=True)
    log = lambda msg: print(msg, flush=True)  # noqa: E731
    work, tmp = work_dir(a.work_dir, "rlx_bench_rollout_")
    rows, infos = [], []
    start = time.perf_counter()
    try:
        for size in sizes:
            info, size_rows = bench_size(size, a, batches, size_tokens.get(size, a.max_tokens), work, log)
            infos.append(info)
            rows += size_rows
    finally:
        torch.set_num_threads(threads_before)
        if tmp is not None:
            tmp.cleanup()
    meta["wall_s"] = time.perf_counter() - start
    table = format_table(rows)
    print(table)
    print("tok/s: median over repeats of generated tokens / generate wall seconds; vllm/hf > 1: vllm faster; "
          "per repeat: each alternating pair's ratio; full: fraction of completions that ran to T (min over repeats)")
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    result = {"meta": meta, "sizes": infos, "rows": rows, "table": table}
    out.write_text(json.dumps(result, indent=2))
    print(f"[bench] wrote {out} ({meta['wall_s']:.0f}s)")
    return result


if __name__ == "__main__":
    main()
