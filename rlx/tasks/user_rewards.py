"""Reward functions given by import path, in TRL's convention (`fn(completions=[...], prompts=[...], <column>=[...])`
-> one float or None per completion), run in a bounded spawn worker (rlx.tasks.workers; docs/data.md).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import traceback

from rlx.tasks.workers import WorkerPool, WorkerSetupError, serve
PASSED_AS = ("completions", "prompts")  # keyword arguments every call carries besides the dataset's columns


def is_import_path(spec: str) -> bool:
    """Registered names are plain words; anything with ':' or '.' is an import path."""
    return ":" in spec or "." in spec


def split_path(spec: str) -> tuple[str, str]:
    """'pkg.mod:fn' or 'pkg.mod.fn' -> ('pkg.mod', 'fn')."""
    module, sep, attr = spec.partition(":") if ":" in spec else spec.rpartition(".")
    if not module or not attr or not sep:
        raise ValueError(f"task.rewards: '{spec}' is not an import path of the form package.module:function")
    return module, attr


def reward_name(spec: str) -> str:
    """The name a reward is logged under (train/rewards/<name>): a registered name, or the function's name."""
    return split_path(spec)[1].rsplit(".", 1)[-1] if is_import_path(spec) else spec


def load_reward(spec: str):
    """The callable behind an import path; a clear ValueError naming the entry when it cannot be used."""
    module, attr = split_path(spec)
    if module == "__main__":
        raise ValueError(f"task.rewards: '{spec}' lives in __main__, which the reward worker process cannot "
                         f"import; put the function in a module on the Python path")
    try:
        mod = importlib.import_module(module)
    except ImportError as e:
        raise ValueError(f"task.rewards: cannot import module '{module}' of reward '{spec}' ({e}); the module "
                         f"must be importable from the launch directory (PYTHONPATH)") from None
    fn = mod
    for part in attr.split("."):
        if not hasattr(fn, part):
            raise ValueError(f"task.rewards: module '{module}' has no attribute '{attr}' (reward '{spec}')")
        fn = getattr(fn, part)
    if not callable(fn):
        raise ValueError(f"task.rewards: '{spec}' is a {type(fn).__name__}, not a function")
    check_signature(spec, fn)
    return fn


def check_signature(spec: str, fn) -> None:
    """TRL's convention: keyword `completions` and `**kwargs` (the dataset's columns come as keywords)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError) as e:
        raise ValueError(f"task.rewards: cannot read the signature of '{spec}' ({e})") from None
    kinds = {p.kind for p in params.values()}
    named = {n for n, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    problems = []
    if "completions" not in named:
        problems.append("a `completions` parameter")
    if inspect.Parameter.VAR_KEYWORD not in kinds:
        problems.append("`**kwargs` (the dataset's columns are passed as keyword arguments)")
    positional_only = [n for n, p in params.items() if p.kind == p.POSITIONAL_ONLY]
    if positional_only:
        problems.append(f"no positional-only parameters (it has {positional_only}; every argument is a keyword)")
    if problems:
        raise ValueError(f"task.rewards: '{spec}' has the signature {fn.__name__}{inspect.signature(fn)}; a reward "
                         f"function needs " + " and ".join(problems) + ", e.g. "
                         f"`def {fn.__name__}(completions, answer, **kwargs) -> list[float | None]`")


def required_columns(fn) -> list[str]:
    """Parameters without a default that only a dataset column can fill."""
    return [n for n, p in inspect.signature(fn).parameters.items()
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.default is p.empty and n not in PASSED_AS]


def check_reward_specs(rewards) -> dict[str, str]:
    """{entry: logged name} for task.rewards, each entry usable and each name distinct, else ValueError naming it."""
    from rlx.tasks.rewards import REWARDS

    if not rewards:
        raise ValueError(f"task.rewards is empty; name at least one reward function, e.g. task.rewards="
                         f"{{correct: 1.0}} (registered: {sorted(REWARDS)}; or package.module:function)")
    names: dict[str, str] = {}
    for spec, weight in rewards.items():
        if is_import_path(spec):
            load_reward(spec)
        elif spec not in REWARDS:
            raise ValueError(f"task.rewards: unknown reward function(s) ['{spec}']; registered: {sorted(REWARDS)}, "
                             f"or give an import path package.module:function")
        if not isinstance(weight, (int, float)):
            raise ValueError(f"task.rewards.{spec}: the weight must be a number, got {weight!r}")
        name = reward_name(spec)
        clash = next((s for s, n in names.items() if n == name), None)
        if clash is not None:
            raise ValueError(f"task.rewards: '{spec}' and '{clash}' would both be logged as train/rewards/{name}")
        names[spec] = name
    return names


def _check_output(out, n: int):
    """The function's return value as [float | None] * n, or a description of what is wrong with it."""
    if isinstance(out, (str, bytes)) or not hasattr(out, "__len__"):
        return None, f"returned a {type(out).__name__}, not a list of {n} floats"
    if len(out) != n:
        return None, f"returned {len(out)} values for {n} completions"
    values = []
    for i, v in enumerate(out):
        if v is None:
            values.append(None)
            continue
        try:
            values.append(float(v))
        except (TypeError, ValueError):
            return None, f"returned {v!r} (a {type(v).__name__}) at position {i}; expected a float or None"
    return values, None


def _load_all(specs: list[str]):
    """The worker's set-up: import every function once (before it says it is ready)."""
    return {s: load_reward(s) for s in specs}


def _call(loaded: dict, msg):
    """One batch call in the worker: ("ok", values) | ("bad", what is wrong) | ("raised", traceback)."""
    spec, kwargs = msg
    try:
        values, problem = _check_output(loaded[spec](**kwargs), len(kwargs["completions"]))
        return ("ok", values) if problem is None else ("bad", problem)
    except Exception:  # the user's bug: its traceback goes back to the run, which stops
        return "raised", traceback.format_exc()


def _reward_worker(conn, mem_mb: int, specs: list[str]) -> None:  # runs in the child process
    serve(conn, mem_mb, functools.partial(_load_all, specs), _call)


class RewardFunctionError(RuntimeError):
    """A user reward function raised or returned something that is not one float or None per completion."""


class UserRewards:
    """Calls import-path reward functions in a bounded worker, with a warm standby for when one is killed."""

    def __init__(self, specs: list[str], timeout_s: float, mem_mb: int = 4096):
        self.specs = list(specs)
        self.worker = WorkerPool(_reward_worker, self.specs, size=1, spares=1, timeout_s=timeout_s, mem_mb=mem_mb,
                                 name="rlx-user-rewards")

    def __call__(self, spec: str, kwargs: dict) -> list[float | None]:
        n = len(kwargs["completions"])
        try:
            answer = self.worker.ask((spec, kwargs))
        except WorkerSetupError as e:
            raise RewardFunctionError(f"task.rewards: the reward worker could not start (importing {self.specs}): "
                                      f"{e}") from None
        if answer is None:  # past the deadline (or the worker died): every completion of the call scores 0, counted
            return [0.0] * n
        kind, value = answer
        if kind == "raised":
            raise RewardFunctionError(f"task.rewards: '{spec}' raised in the reward worker:\n{value}")
        if kind == "bad":
            raise RewardFunctionError(f"task.rewards: '{spec}' {value}")
        return value

    def pop_stats(self) -> dict[str, int]:
        return self.worker.pop_stats()

    def close(self) -> None:
        self.worker.close()
