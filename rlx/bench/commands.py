"""Console entry points of the benchmarks (`rlx-bench-*` in pyproject.toml): run a benchmark's main, exit 0.

The benchmarks' `main` returns its figures (a dict) for the tests; a console script would take that
for an exit status, so each command here calls it and reports success. `python -m rlx.bench.<name>`
runs the same main.
"""

from __future__ import annotations

from importlib import import_module


def _run(module: str) -> int:
    result = import_module(f"rlx.bench.{module}").main()
    return result if isinstance(result, int) else 0


def quant() -> int:
    return _run("quant")


def rollout() -> int:
    return _run("rollout")


def vs_trl() -> int:
    return _run("vs_trl")


def vllm_sync() -> int:
    return _run("vllm_sync")


def offpolicy() -> int:
    return _run("offpolicy")


def gpu() -> int:
    return _run("gpu")
