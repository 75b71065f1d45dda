"""`python -m rlx.eval.audit [key=value ...] [--n 50] [--json OUT]` (rlx-audit): which known reward hacks a
reward set pays for (rlx.tasks.audit), on the config composed as training composes it, without any model."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rlx.tasks.audit import audit, audited_examples, table, verdict_line

EPILOG = """examples:
  rlx-audit task=gsm8k task.train_path=train.jsonl task.eval_path=test.jsonl
  rlx-audit task=gsm8k task.train_path=... task.eval_path=... 'task.rewards={math_verify: 1.0}' --json audit.json
  rlx-audit task=arith 'task.rewards={correct: 1.0, my_pkg.rewards:fmt: 0.1}' --n 20
exit code: 0 no class paid, 1 some class paid, 2 the control (an honest correct answer) was not paid."""


def parse_args(argv: list[str] | None):
    ap = argparse.ArgumentParser(prog="rlx-audit", description="Which known reward hacks (expressions, hedges, "
                                 "lists, conflicting answers, prompt echo, empty formats, unicode digits, nested "
                                 "boxes, extreme length, negated, qualified and corrected answers) the configured reward set pays for; no model is built.",
                                 epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("overrides", nargs="*", help="Hydra overrides composing the training config (task=..., "
                    "task.rewards=..., task.train_path=...)")
    ap.add_argument("--n", type=int, default=50, help="examples to audit (held-out first, then training; default 50)")
    ap.add_argument("--json", default=None, help="also write the result as JSON to this file")
    return ap.parse_args(argv)


def build(overrides: list[str]):
    """(cfg, task) as training builds them, before any model; a refused input raises ValueError naming it."""
    from omegaconf.errors import OmegaConfBaseException

    from rlx.envs import env_task
    from rlx.eval.source import base_config
    from rlx.tasks import build_task

    bad = [o for o in overrides if "=" not in o]
    if bad:
        raise ValueError(f"{bad}: expected Hydra overrides key=value (e.g. task=gsm8k task.train_path=...)")
    cfg = base_config(overrides)
    try:
        task = env_task(cfg.env, cfg.seed, cfg.task) or build_task(cfg.task)  # env=verifiers: its rubric
        chat_prompts = bool(cfg.model.get("chat_prompts", False))
    except OmegaConfBaseException as e:  # a mandatory key left unset (???), a bad interpolation: named
        raise ValueError(f"{e}".splitlines()[0]) from None
    # chat prompts (rendered in training): stated_answer's loose reading is on for them unless task.answer_phrase
    task.chat = chat_prompts or any(e.messages is not None for e in task.train + task.eval)
    return cfg, task


def close(task) -> None:
    """The task's reward worker pools (math-verify, import-path functions): stopped, not left to exit."""
    if task is None:
        return
    for pool in (task.verifier, task.user_rewards):
        if pool is not None:
            pool.close()


def main(argv: list[str] | None = None) -> int:
    """The command: prints the table, returns the exit code (0 ok, 1 paid, 2 broken); refusals exit first."""
    from rlx.run.logging import write_text_atomic
    from rlx.tasks.user_rewards import RewardFunctionError
    from rlx.tasks.workers import WorkerSetupError

    args = parse_args(argv)
    task = None
    try:
        if args.n < 1:
            raise ValueError(f"--n {args.n}: audit at least one example")
        cfg, task = build(args.overrides)
        examples = audited_examples(task, args.n)
        if not examples:
            raise ValueError("the task has no examples to audit")
        chosen = [o.split("=", 1)[1] for o in args.overrides if o.startswith("task=")]
        label = f"{task.name}:{task.env_id}" if hasattr(task, "env_id") else chosen[-1] if chosen else cfg.task.name
        result = {"task": label, "overrides": list(args.overrides),
                  **audit(task, examples)}
    except (ValueError, FileNotFoundError, RewardFunctionError, WorkerSetupError) as e:
        raise SystemExit(f"rlx-audit: error: {e}") from None
    finally:
        close(task)
    print(f"rlx-audit: task={result['task']} rewards={result['rewards']} examples={result['examples']} "
          f"answer_phrase={result['answer_phrase']}")
    print(table(result))
    if result["reward_events"]:
        print(f"rlx-audit: bounded-reward events while scoring (a timeout, a refused over-long input or a worker "
              f"error scores 0): {result['reward_events']}")
    print(verdict_line(result), flush=True)
    code = 2 if result["control"]["verdict"] != "ok" else (1 if result["paid"] else 0)
    result["exit_code"] = code
    if args.json:
        out = Path(args.json)
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(out, json.dumps(result, indent=2, default=str, ensure_ascii=False) + "\n")
        except OSError as e:
            raise SystemExit(f"rlx-audit: error: --json {out}: {e}") from None
    return code


if __name__ == "__main__":
    sys.exit(main())
