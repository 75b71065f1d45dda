"""Benchmarks that print ratios (quant, rollout, vs_trl, vllm_sync, offpolicy, ...) and study scripts (studies/).

Not part of the installed package: a folder beside rlx/, run from a checkout as `python -m benchmarks.NAME`.
Benchmarks import rlx; nothing in rlx imports them (tests/test_layout.py). The GPU check is a user command
and lives in the package: `python -m rlx.gpu_check` (rlx-gpu-check).
"""
