"""Console entry points of the benchmarks (`rlx-bench-*` in pyproject.toml): run a benchmark's main, exit 0.

The benchmarks' `main` returns its figures (a dict) for the tests; a console script would take that
for an exit status, so each command here calls it and reports success. `python -m rlx.bench.<name>`
runs the same main.
"""

from __future__ import annotations

from functools import partial
from importlib import import_module


def _run(module: str) -> int:
    result = import_module(f"rlx.bench.{module}").main()
    return result if isinstance(result, int) else 0


quant = partial(_run, "quant")
quant_error = partial(_run, "quant_error")
rollout = partial(_run, "rollout")
vs_trl = partial(_run, "vs_trl")
vllm_sync = partial(_run, "vllm_sync")
offpolicy = partial(_run, "offpolicy")
distributed = partial(_run, "distributed")
predictive = partial(_run, "predictive")
gpu = partial(_run, "gpu")
update = partial(_run, "update")
threads = partial(_run, "threads")
hf_generate = partial(_run, "hf_generate")
servers = partial(_run, "servers")
dtype = partial(_run, "dtype")
generation = partial(_run, "generation")
