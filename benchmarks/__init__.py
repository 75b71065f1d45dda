"""Benchmarks that print ratios (quant, rollout, vs_trl, vllm_sync, offpolicy, ...) and study scripts (studies/).

Not part of the installed package: a folder beside rlx/, run from a checkout as `python -m benchmarks.NAME`.
Benchmarks import rlx; nothing in rlx imports them (tests/test_layout.py). `rlx-bench NAME` runs one from the
checkout rlx is installed from, and `rlx-gpu-check` the GPU check (`python -m benchmarks.gpu_check`, docs/gpu.md).
"""
