"""The update phase on a real model, lever by lever: `python -m benchmarks.update [--model smollm2]`.

One rollout batch of `task=wordproblems` chat prompts (4 prompts x 4 completions, up to 160 new
tokens, sampled once by the hf engine from the model), then `rlx.algo.Update` on that same batch
under each setting, alternating (plain, chunk, ..., plain, chunk, ...), with the parameters and a
fresh AdamW restored before every call:

  plain   the split before the lean defaults: fixed blocks of algo.micro_batch_size rows over the padded width
  chunk   + algo.logprob_chunk (LM head in chunks, only on the positions the loss uses)
  tokens  + algo.micro_batch_tokens (rows binned by length, no all-padding columns)
  shared  + algo.shared_prefix (each prompt once per group)
  lean    all three
  lean_bf16  lean under trainer.dtype=bf16 autocast (other numerics: not in the default list)
  lean_unheld  lean with a packed base (--override quant=nvfp4) dequantized at every forward, as
          before the update held it (the same values; not in the default list)

Per setting: wall and process CPU seconds per update (mean over repeats, step 1 of each setting's
first call dropped as warm-up), the token slots the decoder and the head compute, an estimate of
the FLOPs (below), and with `--mem` the peak RSS of a fresh process that runs that one update
(`ru_maxrss`, whole process: the model included).

FLOPs: a linear layer of p weights costs 2p per token forward; with LoRA the backward computes the
activation gradients only (2p; the base weights are frozen, the adapters are ~1% of p), so the
decoder costs 4 * p_linear per token slot; attention adds 4 * layers * hidden * context per slot
forward and twice that backward. The head costs 2 * V * H per token forward, 2 * V * H for dL/dh,
and the chunked head recomputes its forward in the backward (+2 * V * H).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.common import child_env

SETTINGS = {
    "plain": {"logprob_chunk": 0, "micro_batch_tokens": 0, "shared_prefix": False},
    "chunk": {"logprob_chunk": 1024, "micro_batch_tokens": 0, "shared_prefix": False},
    "tokens": {"logprob_chunk": 0, "micro_batch_tokens": 4096, "shared_prefix": False},
    "shared": {"logprob_chunk": 0, "micro_batch_tokens": 0, "shared_prefix": True},
    "lean": {"logprob_chunk": 1024, "micro_batch_tokens": 4096, "shared_prefix": True},
    "lean_bf16": {"logprob_chunk": 1024, "micro_batch_tokens": 4096, "shared_prefix": True, "dtype": "bf16"},
    "lean_unheld": {"logprob_chunk": 1024, "micro_batch_tokens": 4096, "shared_prefix": True, "hold": False},
}
NOT_ALGO = ("dtype", "hold")  # setting keys that are not algo.* values
DEFAULT_SETTINGS = "plain,chunk,tokens,shared,lean"


def _algo(setting: str) -> dict:
    return {k: v for k, v in SETTINGS[setting].items() if k not in NOT_ALGO}


def compose(overrides: list[str]):
    from benchmarks.vs_trl_sides import compose_rlx

    return compose_rlx(overrides)


def base_overrides(a) -> list[str]:
    model = [f"model={a.model}"] if a.model else []
    task = ["task=wordproblems", "task.steps=1"] if a.task == "wordproblems" else [f"task={a.task}"]
    return model + task + ["rollout=hf", f"rollout.prompts_per_step={a.prompts}",
                    f"rollout.group_size={a.group}", f"rollout.max_new_tokens={a.max_new}",
                    f"algo.micro_batch_size={a.micro}", f"trainer.threads={a.threads}", "logger.mode=disabled",
                    f"seed={a.seed}"] + list(a.override)


def build(a):
    """(cfg, policy, batch, rewards, trainer): the policy and one scored rollout batch (cached on disk)."""
    import torch

    from rlx.models import build_policy
    from rlx.config.preflight import check
    from rlx.rollout import SamplingParams, build_engine
    from rlx.tasks import build_task

    cfg = compose(base_overrides(a))
    trainer = check(cfg)
    task = build_task(cfg.task)
    task.set_seed(cfg.seed)
    policy, tok = build_policy(cfg, task, print, trainer.device)
    cache = Path(a.work) / "batch.pt"
    if cache.exists():
        batch, rewards = torch.load(cache, weights_only=False)
    else:
        engine = build_engine(cfg.rollout, tok, policy, trainer)
        examples = task.train[: a.prompts]
        t0 = time.time()
        batch = engine.generate([e.prompt for e in examples], a.group, SamplingParams.from_config(cfg.rollout),
                                torch.Generator().manual_seed(a.seed))
        print(f"[bench] generated {len(batch)} completions in {time.time() - t0:.1f}s", flush=True)
        per_fn = task.score([examples[i] for i in batch.group.tolist()], batch.texts)
        rewards = torch.tensor(task.total_reward(per_fn), dtype=torch.float32)
        if float(rewards.std()) == 0:  # every row the same reward: no gradient to time; spread it
            rewards = torch.arange(len(batch), dtype=torch.float32) % 2
        torch.save((batch, rewards), cache)
    return cfg, policy, batch, rewards, trainer


def one_update(cfg, policy, batch, rewards, trainer, setting: str) -> tuple[float, float]:
    """(wall s, process CPU s) of one update under `setting`; the policy is restored afterwards."""
    import torch
    from omegaconf import OmegaConf

    from rlx.algo import Shaped, Update

    from dataclasses import replace

    from rlx.run.device import DTYPES

    c = OmegaConf.merge(cfg, {"algo": _algo(setting)})
    trainer = replace(trainer, dtype=DTYPES[SETTINGS[setting].get("dtype", "fp32")])
    params = [q for q in policy.parameters() if q.requires_grad]
    saved = [q.detach().clone() for q in params]
    opt = torch.optim.AdamW(params, lr=c.algo.lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    t0, c0 = time.perf_counter(), time.process_time()
    update = Update.from_config(c, trainer, sched)
    update.hold_packed_base = SETTINGS[setting].get("hold", True)
    update(policy, opt, Shaped(batch, rewards), None, 1)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    with torch.no_grad():
        for q, s in zip(params, saved):
            q.copy_(s)
    return wall, cpu


def token_slots(cfg, batch, setting: str) -> dict:
    """Decoder token slots (padding included), attention slot-contexts and head tokens of `setting`."""
    from omegaconf import OmegaConf

    from rlx.algo.micro_batches import micro_batches

    a = OmegaConf.merge(cfg.algo, _algo(setting))
    dec = att = head = 0
    for mb in micro_batches(batch, a, "cpu", need=batch.loss_mask):
        if mb.shared:
            P, T = mb.prompt_ids.shape[1], mb.completion_ids.shape[1]
            dec += mb.prompt_ids.shape[0] * P + len(mb.rows) * (T - 1)
            att += mb.prompt_ids.shape[0] * P * P / 2 + len(mb.rows) * (T - 1) * (P + T / 2)
        else:
            n, L = mb.ids.shape
            dec += n * L
            att += n * L * L / 2
        n = mb.ids.shape[0] if mb.ids is not None else mb.completion_ids.shape[0]
        head += int(mb.need.sum()) if mb.need is not None else n * mb.T
    return {"decoder_tokens": dec, "attn_slot_ctx": att, "head_tokens": head}


def flops(policy, slots: dict, chunked: bool) -> float:
    """The estimate of the module docstring, in FLOPs, for one LoRA update."""
    from torch import nn

    from rlx.models.forward import causal_lm
    from rlx.quant import QuantLinear

    lm = causal_lm(policy)
    p_lin = sum(m.weight.numel() for m in lm.model.modules() if isinstance(m, nn.Linear))  # bases and adapters
    # a packed base computes as many multiply-adds as the dense one (dequantized, then a dense matmul)
    p_lin += sum(m.in_features * m.out_features for m in lm.model.modules() if isinstance(m, QuantLinear))
    c = lm.config
    head = 2 * c.vocab_size * c.hidden_size * (3 if chunked else 2)
    return 4 * p_lin * slots["decoder_tokens"] + 12 * c.num_hidden_layers * c.hidden_size * slots["attn_slot_ctx"] \
        + head * slots["head_tokens"]


def mem_worker(a) -> dict:
    """One update in this fresh process; its peak RSS."""
    cfg, policy, batch, rewards, trainer = build(a)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    one_update(cfg, policy, batch, rewards, trainer, a.mem_worker)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    return {"peak_rss_gib": peak, "peak_before_update_gib": before}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2", help="model group (smollm2, tiny, hf with --override model.path=...)")
    p.add_argument("--task", default="wordproblems", help="task group (wordproblems: its 1-step problems)")
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--group", type=int, default=4)
    p.add_argument("--max-new", type=int, default=160)
    p.add_argument("--micro", type=int, default=4, help="algo.micro_batch_size (rows)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--settings", default=DEFAULT_SETTINGS, help=f"comma-separated, from {list(SETTINGS)}")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--mem", action="store_true", help="also the peak RSS of each setting (a fresh process each)")
    p.add_argument("--override", action="append", default=[], help="extra Hydra override (repeatable)")
    p.add_argument("--work", default="outputs/bench/update")
    p.add_argument("--out", default=None, help="JSON results (default: WORK/update.json)")
    p.add_argument("--mem-worker", help=argparse.SUPPRESS)
    return p


def main(argv=None) -> dict:
    p = _parser()
    a = p.parse_args(argv)
    Path(a.work).mkdir(parents=True, exist_ok=True)
    if a.mem_worker:
        print("RESULT " + json.dumps(mem_worker(a)), flush=True)
        return {}
    settings = a.settings.split(",")
    unknown = [s for s in settings if s not in SETTINGS]
    if unknown:
        raise SystemExit(f"--settings: unknown {unknown}; choose from {list(SETTINGS)}")
    cfg, policy, batch, rewards, trainer = build(a)
    times: dict[str, list[tuple[float, float]]] = {s: [] for s in settings}
    for s in settings:  # warm-up: one call each, not timed
        one_update(cfg, policy, batch, rewards, trainer, s)
    for r in range(a.repeats):
        for s in settings:
            times[s].append(one_update(cfg, policy, batch, rewards, trainer, s))
            print(f"[bench] repeat {r + 1}/{a.repeats} {s}: {times[s][-1][0]:.2f}s wall, {times[s][-1][1]:.2f}s CPU",
                  flush=True)
    rows = {}
    for s in settings:
        slots = token_slots(cfg, batch, s)
        fl = flops(policy, slots, SETTINGS[s]["logprob_chunk"] > 0)
        cpu = statistics.fmean(c for _, c in times[s])
        rows[s] = {"wall_s": statistics.fmean(w for w, _ in times[s]), "cpu_s": cpu, **slots, "tflop": fl / 1e12,
                   "gflops_per_cpu_s": fl / 1e9 / cpu}
    if a.mem:
        for s in settings:
            cmd = [sys.executable, "-m", "benchmarks.update", "--mem-worker", s] + [x for x in (argv or sys.argv[1:])
                                                                                   if x != "--mem"]
            env = child_env(OMP_NUM_THREADS=str(a.threads))
            out = subprocess.run(cmd, capture_output=True, text=True, env=env)
            line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
            if out.returncode != 0 or not line:
                raise RuntimeError(f"memory worker {s} failed (exit {out.returncode}):\n{out.stderr[-3000:]}")
            rows[s].update(json.loads(line[-1][7:]))
    base = rows[settings[0]]
    lens = batch.completion_mask.sum(1).float()
    print(f"\nbatch: {len(batch)} rows, prompt {batch.prompt_mask.sum(1).min()}-{batch.prompt_mask.sum(1).max()} tokens, "
          f"completion mean {lens.mean():.0f} max {int(lens.max())}; {a.threads} thread(s), {a.repeats} alternating repeats")
    print("| setting | wall s | CPU s | CPU / " + settings[0] + " | decoder tokens | head tokens | TFLOP (est.) | GFLOP/s per CPU-s |"
          + (" peak RSS GiB |" if a.mem else ""))
    print("|---" * (8 + a.mem) + "|")
    for s, r in rows.items():
        print(f"| {s} | {r['wall_s']:.2f} | {r['cpu_s']:.2f} | {r['cpu_s'] / base['cpu_s']:.2f} | {r['decoder_tokens']} | "
              f"{r['head_tokens']} | {r['tflop']:.2f} | {r['gflops_per_cpu_s']:.0f} |" + (f" {r['peak_rss_gib']:.2f} |" if a.mem else ""))
    dequant_s = dequantize_seconds(policy)
    if dequant_s is not None:
        print(f"one dequantization of every packed layer: {dequant_s:.3f} CPU-s (fp32; what holding saves per forward)")
    out = Path(a.out or Path(a.work) / "update.json")
    out.write_text(json.dumps({"args": vars(a), "rows": rows, "dequantize_cpu_s": dequant_s}, indent=2))
    return rows


def dequantize_seconds(policy) -> float | None:
    """Process CPU seconds of dequantizing every packed (QeRL) layer of `policy` once, in fp32 (median of 3);
    None without a packed base."""
    import torch

    from rlx.quant import QuantLinear

    layers = [m for m in policy.modules() if isinstance(m, QuantLinear)]
    if not layers:
        return None
    times = []
    for _ in range(3):
        c0 = time.process_time()
        for m in layers:
            m.dequantize(torch.float32)
        times.append(time.process_time() - c0)
    return statistics.median(times)


if __name__ == "__main__":
    main()
