"""Episodes of the configured environment on held-out problems, printed: `python -m rlx.eval.episodes [-n N] [overrides]`.

    python -m rlx.eval.episodes -n 6 experiment=smollm2_wordproblems env=calculator   # SmolLM2 (vLLM) with the calculator

Builds the policy (the SFT base, no RL) and engine as `rlx.train` would and prints one episode per problem
(environment tokens in [[...]]), its rewards, the trainer-vs-engine |log-prob| difference and env/* metrics.
"""

from __future__ import annotations

import argparse
import time

import torch


def main(argv: list[str] | None = None) -> None:
    from rlx.envs import check_env, env_task, instruction_tokens, wrap_engine
    from rlx.envs.driver import run_episodes
    from rlx.envs.engine import episode_metrics, transcript
    from rlx.eval.source import base_config
    from rlx.models import base_dir, build_policy
    from rlx.models.forward import token_logprobs
    from rlx.config.preflight import check
    from rlx.rollout import SamplingParams, build_engine, max_sequence_len
    from rlx.run.device import autocast
    from rlx.tasks import build_task

    ap = argparse.ArgumentParser(prog="python -m rlx.eval.episodes", description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=6, help="held-out problems (one episode each)")
    ap.add_argument("overrides", nargs="*", help="Hydra overrides, as for rlx.train")
    args = ap.parse_args(argv)
    cfg = base_config(args.overrides)
    trainer = check(cfg)
    check_env(cfg)
    task = env_task(cfg.env, cfg.seed, cfg.task) or build_task(cfg.task)
    task.set_seed(cfg.seed)
    check_env(cfg, task)
    policy, tok = build_policy(cfg, task, device=trainer.device)
    sp = SamplingParams.from_config(cfg.rollout)
    sp = sp.but(max_tokens=int(cfg.rollout.eval_max_new_tokens or sp.max_tokens))
    probe = [e.prompt for e in task.train[:64]] + [e.prompt for e in task.eval[: args.n]]
    inner = build_engine(cfg.rollout, tok, policy, trainer, fp32_head=cfg.algo.fp32_lm_head, base_dir=base_dir(cfg),
                         seed=cfg.seed, quant_format=cfg.quant.format,
                         max_len=max_sequence_len(cfg.rollout, tok, probe) + instruction_tokens(cfg.env, tok))
    inner.sync(policy, 0)
    engine = wrap_engine(cfg.env, inner, tok)
    make_env = getattr(engine, "make_env", None)
    examples = task.eval[: args.n]
    t0 = time.time()
    if make_env is None:  # env=none: the engine's own single-turn samples
        batch, metrics = engine.generate([e.prompt for e in examples], 1, sp, torch.Generator().manual_seed(cfg.seed)), {}
    else:
        out = run_episodes(inner, make_env, [e.prompt for e in examples], 1, sp, torch.Generator().manual_seed(cfg.seed),
                           engine.budget, examples=examples)
        batch, metrics = out.batch, episode_metrics(out.episodes)
    wall = time.time() - t0
    per_fn = task.score(examples, batch.texts)
    with torch.no_grad(), autocast(trainer):  # the trainer's own forward (bf16 autocast where the run uses it)
        lp = token_logprobs(policy, batch.input_ids.to(trainer.device), batch.attention_mask.to(trainer.device),
                            batch.completion_ids.shape[1], sp.temperature if sp.temperature > 0 else 1.0).cpu()
    lm = batch.loss_mask.bool()
    for r, e in enumerate(examples):
        print(f"===== {r}: gold {e.answer} | " + " ".join(f"{k} {v[r]:g}" for k, v in per_fn.items())
              + f" | {int(batch.forced[r].sum()) if batch.forced is not None else 0} environment tokens")
        print(transcript(tok, batch, r) if batch.forced is not None else batch.texts[r])
    print("-----")
    print({k: sum(v) / len(v) for k, v in per_fn.items()})
    if sp.temperature > 0 and lm.any():
        d = (lp - batch.logprobs).abs()[lm]
        print(f"trainer vs engine |log-prob| on {int(lm.sum())} policy tokens: mean {d.mean():.2e} max {d.max():.2e}")
    print({k: round(v, 4) for k, v in metrics.items()}, f"wall {wall:.1f}s")
    inner.close()


if __name__ == "__main__":
    main()
