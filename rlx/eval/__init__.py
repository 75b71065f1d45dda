"""Evaluation without training: `python -m rlx.eval` (console `rlx-eval`), docs/eval.md.

rlx.eval.source decides what is evaluated (a run, a checkpoint, the base) with which config;
rlx.eval.cli builds it as training does and runs rlx.evaluation.run_eval; rlx.eval.metrics computes
pass@k (unbiased, Chen et al. 2021), maj@k and mean@n; rlx.eval.report writes the JSON, markdown and
JSONL outputs.
"""
