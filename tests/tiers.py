"""The two test tiers, enforced: a test not marked `integration` (the unit tier) may not start a process,
build a vLLM engine or build a training run.

Each guarded call is wrapped once per test process (modules not yet imported are wrapped when they load)
and refuses only while an unmarked test's setup or call runs, so a forgotten mark fails the test with a
message that names the mark instead of slowing the quick command down. A refusal that the code under test
swallows still fails the test (`check`)."""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import os
import sys

import pytest

MARK = "integration"

# Millisecond probes, not the tests' own processes: what libraries run on import (platform.architecture runs
# `file`, ctypes.util.find_library ldconfig or a C compiler) and git (rlx stamps records with the commit)
PROBES = {"file", "ldconfig", "gcc", "cc", "ld", "uname", "git"}


def _probe(popen, args=(), *rest, **kwargs) -> bool:
    program = args.split()[0] if isinstance(args, (str, bytes)) else next(iter(args), "")
    return os.path.basename(os.fsdecode(program)) in PROBES


# module -> [(attribute path, what the call does, which calls of it are allowed)]; the unit tier refuses the rest
GUARDED = {
    "subprocess": [("Popen.__init__", "starts a subprocess", _probe)],
    "multiprocessing.process": [("BaseProcess.start", "starts a process", None)],
    "os": [("fork", "forks a process", None)],
    "vllm.entrypoints.llm": [("LLM.__init__", "builds a vLLM engine", None)],
    "rlx.train": [("build", "builds a training run", None)],
}


class IntegrationOnly(RuntimeError):
    pass


class _State:
    unit_test: str | None = None  # node id of the unmarked test now in setup or call
    refusals: list[str] = []


def _refuse(what: str) -> None:
    test = _State.unit_test
    if test is None:
        return
    message = (f"{test} {what}: that belongs to the integration tier; mark the test (or its module's pytestmark) "
               f"with pytest.mark.{MARK} (the unit tier, pytest -m 'not {MARK}', starts no process, vLLM engine "
               "or training run)")
    _State.refusals.append(message)
    raise IntegrationOnly(message)


def _guard(fn, what: str, allowed):
    @functools.wraps(fn)
    def guarded(*args, **kwargs):
        if allowed is None or not allowed(*args, **kwargs):
            _refuse(what)
        return fn(*args, **kwargs)

    guarded.__tier_guarded__ = True
    return guarded


def _wrap(module) -> None:
    for path, what, allowed in GUARDED[module.__name__]:
        *owners, name = path.split(".")
        owner = module
        for part in owners:
            owner = getattr(owner, part)
        fn = getattr(owner, name)
        if not getattr(fn, "__tier_guarded__", False):
            setattr(owner, name, _guard(fn, what, allowed))


class _WrapOnImport(importlib.abc.MetaPathFinder):
    """Wraps a guarded module's calls right after the module runs, before anyone imports a name from it."""

    def find_spec(self, name, path, target=None):
        if name not in GUARDED or name in sys.modules:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_wrap(module):
            exec_module(module)
            _wrap(module)

        spec.loader.exec_module = exec_and_wrap
        return spec


def install() -> None:
    """Wrap the guarded calls of the modules loaded so far, and of the others when they load."""
    for name in GUARDED:
        if name in sys.modules:
            _wrap(sys.modules[name])
    if not any(isinstance(f, _WrapOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _WrapOnImport())


def enter(item: pytest.Item) -> None:
    _State.unit_test = None if item.get_closest_marker(MARK) else item.nodeid
    _State.refusals = []


def leave() -> None:
    _State.unit_test = None


def check() -> None:
    """Fail the test if a guarded call was refused, even where the code under test caught the error."""
    if _State.refusals:
        refusals, _State.refusals = _State.refusals, []
        pytest.fail(refusals[0], pytrace=False)

