"""Generation against this CPU's limit: `python -m benchmarks.generation [--engines hf,vllm,vllm_server]
[--batches 1,16,64,200] [--budgets 160,512] [--quants none,nvfp4] [--threads 2] [--repeats 1] [--out FILE]`.

SmolLM2-135M-Instruct (`experiment=smollm2_gsm8k`: chat-rendered GSM8K held-out questions, LoRA attached as
in training) generates greedily (temperature 0; `--temperature`, `--samples` for groups) through rlx's
engine interface, exactly as evaluation and the training loop call it: one `engine.generate` call of
`batch` rows per measurement. Per (budget, batch) the engines run in turn, their order rotated at every
repeat (so a change in the machine's load hits every arm), each after one untimed warm-up call per engine.

Engines (`--engines`, comma-separated): `hf` (in-process transformers on the trainer's module), `vllm`
(colocated), `vllm_server` (one local server, `rollout.server.threads` = `--threads`, weights merged
as training's `rollout.vllm.sync=merged`, so it serves the plain base as the colocated engine does). An
arm may carry rollout overrides after `@`, joined by `+`: `vllm@vllm.kv_cache_gb=0.25` (the old default
cache), `vllm@vllm.prefix_caching=false+vllm.max_num_batched_tokens=16384`, `vllm_server@server.threads=1`.
Every vLLM arm without its own `vllm.kv_cache_gb` gets the same cache: rlx's rule (rlx.rollout.kv_sizing)
for the largest batch and budget of the run.

`--quants none,nvfp4` (QeRL's speed side): every engine arm once per base format, each format its own policy
built as training builds it (`quant=<format>`, the LoRA on top), labelled `engine|format`. On this CPU
vLLM has no FP4 kernel, so a quantized base reaches vLLM as its dequantized values merged with the adapter
(rollout.vllm.sync=merged, rlx.rollout.vllm), and the `hf` engine runs rlx's QuantLinear (dequantize, then
`F.linear`). Each arm's weight sync (`engine.sync`, what a training step pays before it generates:
dequantize + merge + load for a quantized base) is timed `--sync-repeats` times, alternating like the calls.
The printed ratios are each format's tok/s (and sync seconds) over the first format's, per engine and call.

Measured per call: generated tokens, wall seconds and CPU seconds (this process's; a server arm adds
its whole process group's), tok/s = tokens / wall seconds, and a sha1 of the texts (same hash = the
same tokens). The bounds come from two microbenchmarks in this process, with the same threads, just
before the generation runs (and again after, reported as a drift):
  * GEMM rate F: the best of several fp32 (or bf16) [256 x 576] x [576 x 1536] and [1024 x 576] x [576 x
    1536] matmuls, FLOP/s;
  * copy bandwidth BW: `dst.copy_(src)` of 256 MiB, (read + write) bytes / s.
For a call's actual token counts (prompt p_i, completion c_i, the longest c_max), the work it cannot avoid:
  * FLOPs = sum over prompt and completion tokens of (2 x the linear weights (134.5M, the tied head
    counted once) + 4 x layers x q_heads x head_dim x context), a group's shared prompt (`--samples`) once
  * bytes = c_max decode steps x the weights (each step reads every weight once) + the KV cache each decode
    token reads (context x KV bytes/token) + the prefill's weights read once
Memory bound = tokens / (bytes / BW), FLOP bound = tokens / (FLOPs / F), bound = the smaller, and
`frac` = measured tok/s / bound: the share of this CPU's limit a call reaches. A lower bound on time
(no engine moves fewer bytes or does fewer FLOPs), so frac <= 1 up to the microbenchmarks' noise.
Timings are figures to read, never a test's pass/fail.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import time
from pathlib import Path

ENGINES = ("hf", "vllm", "vllm_server")
BASE = ["experiment=smollm2_gsm8k", "model.sft.data=null", "rollout.eval_k=0", "logger.mode=disabled"]  # the pretrained model


# ---- the CPU's bounds ------------------------------------------------------------------------------------
def _rates(work: float, run, repeats: int) -> tuple[float, float]:
    """(best work / wall second, median work / process CPU second) of `repeats` calls of `run`. On a shared
    machine the best wall rate is the one with the cores to itself; the CPU rate counts only the time scheduled."""
    walls, cpus = [], []
    for _ in range(repeats):
        c0, w0 = time.process_time(), time.perf_counter()
        run()
        walls.append(work / (time.perf_counter() - w0))
        cpus.append(work / max(time.process_time() - c0, 1e-9))
    return max(walls), statistics.median(cpus)


def gemm_flops(dtype, repeats: int = 15) -> dict:
    """FLOP/s of SmolLM2-shaped matmuls ([M x 576] x [576 x 1536], M = 256 and 1024: decode at a large batch,
    prefill): the best over `repeats` runs of ~0.1-0.3 s, per wall second and per CPU second (median)."""
    import torch

    gen = torch.Generator().manual_seed(0)
    best, per_cpu = 0.0, []
    for m in (256, 1024):
        x = torch.randn(m, 576, generator=gen).to(dtype)
        w = torch.randn(576, 1536, generator=gen).to(dtype)
        x @ w  # warm-up
        calls = max(1, 16384 // m)

        def run():
            for _ in range(calls):
                x @ w

        wall, cpu = _rates(2.0 * m * 576 * 1536 * calls, run, repeats)
        best, per_cpu = max(best, wall), per_cpu + [cpu]
    return {"flops": best, "flops_per_cpu_s": max(per_cpu)}


def copy_bandwidth(mib: int = 256, repeats: int = 15) -> dict:
    """(read + write) bytes/s of one 256 MiB tensor copy: best per wall second, median per CPU second."""
    import torch

    src = torch.ones(mib << 18, dtype=torch.float32)  # mib MiB
    dst = torch.empty_like(src)
    dst.copy_(src)  # warm-up: pages touched
    wall, cpu = _rates(2.0 * src.numel() * 4, lambda: dst.copy_(src), repeats)
    return {"bytes_per_s": wall, "bytes_per_cpu_s": cpu}


def bounds(model_conf: dict, dtype_bytes: int, prompts: list[int], completions: list[int], flops: float,
           bandwidth: float, samples: int = 1) -> dict:
    """tok/s no engine can beat on this call's token counts (module docstring); `samples` rows in a row share
    their prompt, whose prefill is counted once (a prefix cache computes it once)."""
    from rlx.rollout.kv_sizing import kv_bytes_per_token

    L, H = int(model_conf["num_hidden_layers"]), int(model_conf["hidden_size"])
    heads = int(model_conf["num_attention_heads"])
    kv_heads = int(model_conf.get("num_key_value_heads") or heads)
    hd = int(model_conf.get("head_dim") or H // heads)
    inter, vocab = int(model_conf["intermediate_size"]), int(model_conf["vocab_size"])
    linear = L * (H * heads * hd * 2 + H * kv_heads * hd * 2 + 3 * H * inter) + vocab * H  # q, o, k, v, mlp; head
    kv_tok = kv_bytes_per_token(model_conf, dtype_bytes)
    attn = 4 * L * heads * hd  # FLOPs per token per position of context (QK^T and PV)
    flop = byte = 0.0
    for i, (p, c) in enumerate(zip(prompts, completions)):
        if i % samples == 0:  # the group's prompt: prefilled once
            flop += 2 * linear * p + attn * p * (p + 1) / 2
        ctx_decode = c * p + c * (c - 1) / 2  # each generated token attends to everything before it
        flop += 2 * linear * c + attn * ctx_decode
        byte += kv_tok * ctx_decode  # each decode step reads the sequence's KV cache
    steps = max(completions) if completions else 0
    byte += (steps + 1) * linear * dtype_bytes  # every decode step (and the prefill) reads every weight once
    tokens = sum(completions)
    mem = tokens / (byte / bandwidth) if byte else float("inf")
    fl = tokens / (flop / flops) if flop else float("inf")
    return {"mem_bound_tok_s": mem, "flop_bound_tok_s": fl, "bound_tok_s": min(mem, fl),
            "bound": "memory" if mem < fl else "FLOPs", "gflop": flop / 1e9, "gbyte": byte / 1e9}


# ---- process CPU of a server arm ---------------------------------------------------------------------------
def _group_cpu(engine) -> float:
    """CPU seconds of every local server's process tree (0 for an in-process engine)."""
    import psutil

    total = 0.0
    for s in getattr(getattr(engine, "pool", None), "servers", []):
        if s.proc is None:
            continue
        try:
            root = psutil.Process(s.proc.pid)
            for p in [root, *root.children(recursive=True)]:
                try:
                    t = p.cpu_times()
                    total += t.user + t.system
                except psutil.Error:
                    pass
        except psutil.Error:
            pass
    return total


# ---- arms ----------------------------------------------------------------------------------------------------
def parse_arm(spec: str) -> tuple[str, list[str]]:
    """'vllm@vllm.kv_cache_gb=0.25+vllm.prefix_caching=false' -> ('vllm', ['vllm.kv_cache_gb=0.25', ...])."""
    name, _, rest = spec.partition("@")
    if name not in ENGINES:
        raise SystemExit(f"--engines: '{name}' is not one of {list(ENGINES)}")
    overrides = [o for o in rest.split("+") if o]
    for o in overrides:
        if "=" not in o:
            raise SystemExit(f"--engines: override '{o}' of {spec} is not key=value")
    return name, overrides


def arm_config(cfg, name: str, overrides: list[str], threads: int, kv_gb: float):
    """The run's typed rollout node for one arm: its engine, the shared KV cache, its own overrides."""
    import copy

    import yaml
    from omegaconf import OmegaConf

    r = copy.deepcopy(cfg.rollout)
    r.engine = name
    if name == "vllm_server":
        r.server.num, r.server.threads, r.vllm.sync = 1, threads, "merged"
    if name != "hf":
        r.vllm.kv_cache_gb = kv_gb
    for o in overrides:
        key, _, value = o.partition("=")
        OmegaConf.update(r, key, yaml.safe_load(value), force_add=False)  # typed: refuses an unknown key
    return r


def label(spec: str, quant: str, quants: list[str]) -> str:
    """An arm's name: the engine spec, with its base format when the run compares formats."""
    return spec if len(quants) == 1 and quant == "none" else f"{spec}|{quant}"


def build_engines(a, arms):
    """(cfg, trainer, tok, prompts, engines {label: (engine, policy, engine spec, format)}, kv plan, model config,
    dtype bytes):
    every engine arm at every base format of `a.quants`, each format its own policy."""
    from rlx.eval.cli import prepare
    from rlx.models import base_dir, build_policy
    from rlx.rollout import build_engine, max_sequence_len
    from rlx.rollout.kv_sizing import DTYPE_BYTES, kv_bytes_per_token, model_config, plan_kv_cache
    from rlx.run.device import seed_everything
    from rlx.run.logging import say
    from rlx.tasks import build_task

    batch, budget = max(a.batches), max(a.budgets)
    over = [*BASE, f"trainer.dtype={a.dtype}", f"trainer.threads={a.threads}", f"rollout.max_new_tokens={budget}",
            f"rollout.vllm.max_num_seqs={batch}", f"rollout.eval_chunk={batch}", f"rollout.batch_size={batch}",
            *a.override]
    _, src, cfg, _, trainer = prepare([*over, f"quant={a.quants[0]}"])
    seed_everything(cfg.seed)
    task = build_task(cfg.task)
    task.set_seed(cfg.seed)
    policy, tok = build_policy(cfg, task, say, trainer.device)
    policies = {a.quants[0]: (cfg, policy)}
    for q in a.quants[1:]:  # the same task and seed; only the base's format differs
        qcfg = prepare([*over, f"quant={q}"])[2]
        seed_everything(qcfg.seed)
        policies[q] = (qcfg, build_policy(qcfg, task, say, trainer.device)[0])
    pool = [e.prompt for ex in task.eval_sets.values() for e in ex]
    need = -(-batch // a.samples)
    prompts = (pool * (need // len(pool) + 1))[:need]
    probe = [e.prompt for e in task.train[:64]] + pool[:64]
    max_len = max_sequence_len(cfg.rollout, tok, probe)
    longest = max(len(tok(q, add_special_tokens=False).input_ids) for q in prompts)
    dtype = "bfloat16" if a.dtype == "bf16" else "float32"
    conf = model_config(base_dir(cfg))
    plan = plan_kv_cache(0.0, batch, longest + budget, kv_bytes_per_token(conf, DTYPE_BYTES[dtype]), batch)
    say(f"[bench] every vLLM arm without its own size: {plan.describe()}")
    engines = {}
    try:
        for q, (qcfg, qpolicy) in policies.items():
            for spec in arms:
                name, overrides = parse_arm(spec)
                r = arm_config(qcfg, name, overrides, a.threads, plan.bytes / (1 << 30))
                e = build_engine(r, tok, qpolicy, trainer, fp32_head=qcfg.algo.fp32_lm_head,
                                 base_dir=base_dir(qcfg), seed=qcfg.seed, max_len=max_len,
                                 quant_format=qcfg.quant.format,
                                 log_dir=Path(a.work) / "servers" / q if a.work else None)
                engines[label(spec, q, a.quants)] = (e, qpolicy, spec, q)
                e.sync(qpolicy, 0)
    except BaseException:  # e.g. one arm's cache no longer fits beside the others: release what was built
        for e, *_ in engines.values():
            e.close()
        raise
    return cfg, trainer, tok, prompts, engines, plan, conf, DTYPE_BYTES[dtype]


def timed(engine, prompts: list[str], n: int, sp) -> dict:
    seeds = list(range(len(prompts) * n))
    c0, s0, w0 = time.process_time(), _group_cpu(engine), time.perf_counter()
    b = engine.generate(prompts, n, sp, None, seeds=seeds)
    wall = time.perf_counter() - w0
    cpu = time.process_time() - c0 + _group_cpu(engine) - s0
    comp = b.completion_mask.sum(1).tolist()
    prom = b.prompt_mask.sum(1).tolist()
    return {"rows": len(b), "tokens": int(sum(comp)), "wall_s": wall, "cpu_s": cpu, "tok_s": sum(comp) / wall,
            "tok_cpu_s": sum(comp) / max(cpu, 1e-9), "prompt_tokens": prom, "completion_tokens": comp,
            "texts_sha1": hashlib.sha1("\x00".join(b.texts).encode()).hexdigest()[:12]}


def rotated(xs: list, k: int) -> list:
    """xs started at position k (mod len): each repeat's arm order, so a change in load hits every arm."""
    return xs[k % len(xs):] + xs[: k % len(xs)]


def timed_sync(engine, policy, version: int) -> dict:
    """One weight sync as a training step pays it (the policy's current weights into the engine)."""
    c0, s0, w0 = time.process_time(), _group_cpu(engine), time.perf_counter()
    engine.sync(policy, version)
    return {"wall_s": time.perf_counter() - w0, "cpu_s": time.process_time() - c0 + _group_cpu(engine) - s0}


def ratios(rows: list[dict], syncs: list[dict], quants: list[str]) -> list[str]:
    """Each format's median tok/s and sync seconds over the first format's, per engine spec and call shape."""
    if len(quants) < 2:
        return []
    med = lambda xs: statistics.median(xs) if xs else float("nan")  # noqa: E731
    out = []
    specs = list(dict.fromkeys(r["spec"] for r in rows))
    for spec in specs:
        ref = [s["wall_s"] for s in syncs if s["engine"] == label(spec, quants[0], quants)]
        for q in quants[1:]:
            mine = [s["wall_s"] for s in syncs if s["engine"] == label(spec, q, quants)]
            if ref and mine:
                out.append(f"{spec}: sync {q} / {quants[0]} = {med(mine) / med(ref):.2f} "
                           f"({med(mine):.2f} s / {med(ref):.2f} s, median of {len(mine)})")
        for budget, batch in dict.fromkeys((r["budget"], r["batch"]) for r in rows if r["spec"] == spec):
            pick = lambda q, key: [r[key] for r in rows if (r["spec"], r["quant"], r["budget"], r["batch"])  # noqa: E731
                                   == (spec, q, budget, batch)]
            for q in quants[1:]:
                num, den = pick(q, "tok_s"), pick(quants[0], "tok_s")
                if num and den:
                    cn, cd = pick(q, "tok_cpu_s"), pick(quants[0], "tok_cpu_s")
                    out.append(f"{spec} budget {budget} batch {batch}: tok/s {q} / {quants[0]} = "
                               f"{med(num) / med(den):.2f} ({med(num):.1f} / {med(den):.1f}); per CPU-s "
                               f"{med(cn) / med(cd):.2f}")
    return out


def table(rows: list[dict]) -> str:
    head = ("| engine | budget | batch | tokens | wall s | CPU s | tok/s | memory bound | FLOP bound | frac | "
            "tok/CPU-s | bound per CPU-s | frac (CPU) | load | texts |\n" + "|---" * 15 + "|")
    lines = [head]
    for r in rows:
        lines.append(f"| {r['engine']} | {r['budget']} | {r['batch']} | {r['tokens']} | {r['wall_s']:.1f} | "
                     f"{r['cpu_s']:.1f} | {r['tok_s']:.1f} | {r['mem_bound_tok_s']:.0f} | {r['flop_bound_tok_s']:.0f} | "
                     f"{r['frac']:.2f} | {r['tok_cpu_s']:.1f} | {r['bound_tok_cpu_s']:.0f} | {r['frac_cpu']:.2f} | "
                     f"{r['load']:.1f} | {r['texts_sha1']} |")
    return "\n".join(lines)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engines", default=",".join(ENGINES),
                    help="arms, comma-separated: hf | vllm | vllm_server, each optionally @key=value+key=value")
    ap.add_argument("--batches", default="1,16,64,200", help="rows per generate call")
    ap.add_argument("--budgets", default="160,512", help="max new tokens")
    ap.add_argument("--hf-batches", default=None, help="the hf arms' batches (default: --batches); the hf engine at "
                    "batch 200 x 512 takes ~30x the CPU time of vLLM")
    ap.add_argument("--threads", type=int, default=2, help="trainer.threads (hf, colocated vLLM) and server threads")
    ap.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32")
    ap.add_argument("--quants", default="none", help="base formats, comma-separated (none | nvfp4 | nf4 | mxfp4): "
                    "every engine arm at each, the first the ratios' reference")
    ap.add_argument("--sync-repeats", type=int, default=3, help="timed weight syncs per arm (0: none)")
    ap.add_argument("--samples", type=int, default=1, help="completions per prompt (a batch of B rows is B / samples "
                    "prompts); > 1 needs --temperature > 0 to differ")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--out", default="outputs/bench/generation.json")
    ap.add_argument("--work", default=None, help="where server logs go (default: a temporary directory)")
    ap.add_argument("override", nargs="*", help="extra Hydra overrides (e.g. task.n_eval=200)")
    a = ap.parse_args(argv)
    a.batches = [int(x) for x in a.batches.split(",")]
    a.budgets = [int(x) for x in a.budgets.split(",")]
    hf_batches = set(int(x) for x in a.hf_batches.split(",")) if a.hf_batches else set(a.batches)
    arms = [s for s in a.engines.split(",") if s]
    for s in arms:
        parse_arm(s)
    a.quants = [q for q in a.quants.split(",") if q]
    from rlx.sweeps.spec import CONF_DIR

    known = sorted(p.stem for p in (CONF_DIR / "quant").glob("*.yaml"))
    bad = [q for q in a.quants if q not in known] or ([] if len(set(a.quants)) == len(a.quants) else ["a repeat"])
    if not a.quants or bad:
        raise SystemExit(f"--quants {a.quants}: {bad or 'empty'} is not a list of distinct formats of {known}")
    given = [o for o in a.override if o.lstrip("+").startswith("quant=")]
    if given:  # the bench sets each arm's format itself; an override would silently lose to it
        raise SystemExit(f"{given[0]}: the base's format comes from --quants (e.g. --quants {given[0].split('=', 1)[1]})")
    import torch

    from rlx.rollout.base import SamplingParams

    cfg, trainer, tok, prompts, engines, plan, conf, dbytes = build_engines(a, arms)
    dt = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    try:
        before = {**gemm_flops(dt), **copy_bandwidth()}
        print(f"[bench] load {os.getloadavg()[0]:.1f}; {a.threads} thread(s); GEMM {before['flops'] / 1e9:.1f} GFLOP/s "
              f"({before['flops_per_cpu_s'] / 1e9:.1f} per CPU-s), copy {before['bytes_per_s'] / 1e9:.1f} GB/s "
              f"({before['bytes_per_cpu_s'] / 1e9:.1f} per CPU-s)", flush=True)
        sp0 = SamplingParams.from_config(cfg.rollout).but(temperature=a.temperature)
        for e, *_ in engines.values():  # warm-up: first-call costs out of the timings
            e.generate(prompts[:2], 1, sp0.but(max_tokens=8), None, seeds=[0, 1])
        labels = list(engines)
        syncs: list[dict] = []
        for rep in range(a.sync_repeats):  # rotated like the calls, so the machine's load hits every arm
            for name in rotated(labels, rep):
                e, pol, _, _ = engines[name]
                syncs.append({"engine": name, "repeat": rep, **timed_sync(e, pol, rep + 1)})
                print(f"[bench] {name} sync: {syncs[-1]['wall_s']:.2f} s ({syncs[-1]['cpu_s']:.2f} CPU-s)", flush=True)
        rows: list[dict] = []
        for budget in a.budgets:
            sp = sp0.but(max_tokens=budget)
            for batch in a.batches:
                ps = prompts[: max(1, batch // a.samples)]
                for rep in range(a.repeats):
                    for name in rotated(labels, rep):
                        e, _, spec, quant = engines[name]
                        if parse_arm(spec)[0] == "hf" and batch not in hf_batches:
                            continue
                        load = os.getloadavg()[0]
                        m = timed(e, ps, a.samples, sp)
                        pt, ct = m.pop("prompt_tokens"), m.pop("completion_tokens")
                        b = bounds(conf, dbytes, pt, ct, before["flops"], before["bytes_per_s"], a.samples)
                        bc = bounds(conf, dbytes, pt, ct, before["flops_per_cpu_s"], before["bytes_per_cpu_s"], a.samples)
                        row = {"engine": name, "spec": spec, "quant": quant, "budget": budget,
                               "batch": m["rows"], "repeat": rep, "load": load,
                               **m, **b, "frac": m["tok_s"] / b["bound_tok_s"],
                               "bound_tok_cpu_s": bc["bound_tok_s"], "frac_cpu": m["tok_cpu_s"] / bc["bound_tok_s"]}
                        rows.append(row)
                        print(f"[bench] {name} budget {budget} batch {m['rows']}: {m['tokens']} tokens, "
                              f"{m['wall_s']:.1f} s ({m['cpu_s']:.1f} CPU-s), {m['tok_s']:.1f} tok/s, "
                              f"{m['tok_cpu_s']:.1f} tok/CPU-s; bound {b['bound_tok_s']:.0f} tok/s ({b['bound']}; memory "
                              f"{b['mem_bound_tok_s']:.0f}, FLOPs {b['flop_bound_tok_s']:.0f}), "
                              f"{bc['bound_tok_s']:.0f} tok/CPU-s; frac {row['frac']:.2f} (wall), "
                              f"{row['frac_cpu']:.2f} (CPU); load {load:.1f}; texts {m['texts_sha1']}", flush=True)
                        if a.out:  # after every row: a run stopped half-way keeps what it measured
                            Path(a.out).parent.mkdir(parents=True, exist_ok=True)
                            Path(a.out).write_text(json.dumps({"before": before, "syncs": syncs, "rows": rows}, indent=2))
        after = {**gemm_flops(dt), **copy_bandwidth()}
    finally:
        for e, *_ in engines.values():
            e.close()
    drift = {"flops": after["flops"] / before["flops"], "bytes_per_s": after["bytes_per_s"] / before["bytes_per_s"]}
    print(table(rows))
    print(f"[bench] microbenchmarks after / before: GEMM {drift['flops']:.2f}, copy {drift['bytes_per_s']:.2f}")
    compared = ratios(rows, syncs, a.quants)
    for line in compared:
        print(f"[bench] {line}")
    out = {"args": {k: v for k, v in vars(a).items()}, "kv_plan": plan.describe(), "before": before, "after": after,
           "syncs": syncs, "ratios": compared, "rows": rows, "median_tok_s": {f"{s}|{bu}|{ba}": statistics.median(
               r["tok_s"] for r in rows if (r["engine"], r["budget"], r["batch"]) == (s, bu, ba))
               for s, bu, ba in {(r["engine"], r["budget"], r["batch"]) for r in rows}}}
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
