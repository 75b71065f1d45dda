"""`python -m benchmarks.studies.testbed_probe [overrides...]`: what the initial policy of an experiment does, before any RL.

The calibration numbers of the mini testbeds (conf/experiment/mini_*.yaml, docs/results.md):
- greedy and sampled (rollout temperature) accuracy on held-out prompts, and for the `rules` task the
  share of completions that apply *some* rule to the digits (the base can do the rules) vs the key's own
  rule (what is rewarded);
- the share of G-sample groups with at least one rewarded completion (GRPO learns only from those);
- an entropy-vs-sigma probe for AQN: the policy's mean token entropy and pass rate under channel-wise
  Gaussian noise of fixed sigma on the RMSNorm weights (QeRL's AQN sites), `--draws` noise draws per
  sigma, the same prompts and sampling streams at every sigma (common random numbers).

Overrides are Hydra overrides of `rlx.train` (e.g. `+experiment=mini_qerl`). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile


def _share(flags) -> float:
    flags = list(flags)
    return sum(flags) / max(1, len(flags))


def probe(overrides: list[str], sigmas: list[float], draws: int, prompts: int) -> dict:
    import torch

    from benchmarks.vs_trl_sides import compose_rlx
    from rlx.rollout.base import SamplingParams
    from rlx.rollout.schedule import generate_groups
    from rlx.tasks.answers import final_answer
    from rlx.tasks.synthetic import RULES
    from rlx.train import build

    cfg = compose_rlx([*overrides, "noise=aqn", "noise.schedule=constant", "noise.stages=1", "logger=disabled",
                       "train.resume=never"])
    G = cfg.rollout.group_size
    with tempfile.TemporaryDirectory(prefix="rlx-probe-") as tmp:
        p = build(cfg, tmp)
        held = p.task.eval[:prompts]

        def applies_a_rule(ex, text: str) -> bool:
            digits = ex.prompt.split(":", 1)[1].rstrip("=") if ":" in ex.prompt else None
            answer = final_answer(text)  # what the `correct` reward compares
            return digits is not None and any(answer == f(digits) for f in RULES.values())

        out: dict = {"overrides": overrides, "group_size": G, "prompts": len(held)}
        greedy = p.engine.generate([e.prompt for e in held], 1, SamplingParams(0.0, 1.0, 0, cfg.rollout.max_new_tokens),
                                   torch.Generator().manual_seed(0))
        out["greedy_acc"] = _share(p.task.passed(p.task.score(held, greedy.texts)))
        sampled = p.engine.generate([e.prompt for e in held], G, p.sampling, torch.Generator().manual_seed(0))
        rows = [held[i] for i in sampled.group.tolist()]
        passed = p.task.passed(p.task.score(rows, sampled.texts))
        out["sampled_acc"] = _share(passed)
        out["groups_with_a_pass"] = _share(any(passed[i * G:(i + 1) * G]) for i in range(len(held)))
        if cfg.task.name == "rules":
            out["greedy_applies_a_rule"] = _share(applies_a_rule(e, t) for e, t in zip(held, greedy.texts))
            out["sampled_applies_a_rule"] = _share(applies_a_rule(e, t) for e, t in zip(rows, sampled.texts))
        table = []
        for sigma in sigmas:
            p.noise.cfg.sigma_start = float(sigma)
            ent, acc = [], []
            for d in range(draws):
                p.task.load_state_dict({"epoch": 0, "pos": 0, "seed": 0})  # the same prompts at every sigma
                examples, batch = generate_groups(p.engine, p.task, prompts, G, p.sampling,
                                                  torch.Generator().manual_seed(d), noise=p.noise, step=d + 1)
                mask = batch.completion_mask
                ent.append(((batch.entropy * mask).sum() / mask.sum()).item())
                acc.append(_share(p.task.passed(p.task.score([examples[i] for i in batch.group.tolist()], batch.texts))))
            table.append({"sigma": sigma, "entropy": round(statistics.mean(ent), 4),
                          "entropy_sd": round(statistics.stdev(ent), 4) if draws > 1 else 0.0,
                          "pass_rate": round(statistics.mean(acc), 4)})
        out["entropy_vs_sigma"] = table
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("overrides", nargs="*", help="Hydra overrides of rlx.train (e.g. +experiment=mini_qerl)")
    ap.add_argument("--sigmas", default="0,0.01,0.03,0.1,0.3,1", help="comma-separated noise scales")
    ap.add_argument("--draws", type=int, default=3, help="noise draws per sigma")
    ap.add_argument("--prompts", type=int, default=64, help="held-out / training prompts per measurement")
    a = ap.parse_args(argv)
    result = probe(a.overrides, [float(s) for s in a.sigmas.split(",")], a.draws, a.prompts)
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
