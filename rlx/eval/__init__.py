"""Held-out evaluation, during training (val/*) and without it: `python -m rlx.eval` (console `rlx-eval`),
docs/eval.md.

rlx.eval.evaluate generates and scores every eval set (`run_eval`), for training's `Evaluator` and for
the command alike; rlx.eval.source decides what the command evaluates (a run, a checkpoint, the base)
with which config; rlx.eval.cli builds it as training does and runs rlx.eval.evaluate.run_eval;
rlx.eval.metrics computes pass@k (unbiased, Chen et al. 2021), maj@k and mean@n; rlx.eval.report writes
the JSON, markdown and JSONL outputs.
"""
