"""Loading a verifiers environment: `env.id` names it, `env.args` are its `load_environment` keyword arguments.

`env.id` is one of
- a module name on the Python path (`wordproblems_vf`, `my_pkg.my_env`; '-' read as '_', as verifiers'
  own loader does for installed environments);
- a path to a `.py` file that defines `load_environment` (its folder goes on the Python path, so the file
  can import its neighbours);
- a path to a folder: its `__init__.py`, else the `<folder name>.py` inside it (an Environments Hub
  environment's layout: `my-env/my_env.py` beside its pyproject.toml).

An environment is loaded once per process and (id, args) (`load`): the task and the engine of one run
share it. A path-loaded module gets a name made from its path, the same in every process, so a spawn
worker that loads it again can unpickle what the environment put into an episode's state.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import sys
from pathlib import Path

_LOADED: dict[tuple[str, str], object] = {}
INPUT_KEYS = ("prompt", "answer", "task", "info", "example_id")  # what verifiers' rollout reads of a row


def load(env_id: str, args: dict | None = None):
    """The `vf.Environment` that `env_id`'s `load_environment(**args)` returns, loaded once per process."""
    args = dict(args or {})
    key = (str(env_id), json.dumps(args, sort_keys=True, default=str))
    if key not in _LOADED:
        _LOADED[key] = _checked(import_module(str(env_id)), env_id, args)
    return _LOADED[key]


def import_module(env_id: str, key: str = "env.id"):
    """The module `env_id` names (a module name, a .py file or a folder; see the module docstring); `key` is
    the config key a refusal names."""
    path = Path(env_id).expanduser()
    if env_id.endswith(".py") or path.exists():
        return _from_path(path.resolve(), env_id, key)
    try:
        return importlib.import_module(env_id.replace("-", "_"))
    except ImportError as e:
        raise ValueError(f"{key}={env_id!r}: no such file or folder, and no importable module of that name ({e}); "
                         f"give a module on the Python path or a path to a .py file or an environment's "
                         f"folder") from None


def _from_path(path: Path, env_id: str, key: str):
    if path.is_dir():
        candidates = [path / "__init__.py", path / f"{path.name.replace('-', '_')}.py"]
        file = next((c for c in candidates if c.is_file()), None)
        if file is None:
            raise ValueError(f"{key}={env_id!r}: the folder holds neither {candidates[0].name} nor "
                             f"{candidates[1].name}")
    elif path.is_file():
        file = path
    else:
        raise ValueError(f"{key}={env_id!r}: no such file ({path})")
    digest = hashlib.sha1(str(file).encode()).hexdigest()[:10]
    name = f"rlx_vf_{file.parent.name if file.name == '__init__.py' else file.stem}_{digest}".replace("-", "_")
    if name in sys.modules:
        return sys.modules[name]
    if str(file.parent) not in sys.path:  # the environment may import the files beside it
        sys.path.insert(0, str(file.parent))
    package = [str(file.parent)] if file.name == "__init__.py" else None
    spec = importlib.util.spec_from_file_location(name, file, submodule_search_locations=package)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def _checked(module, env_id: str, args: dict):
    """`module.load_environment(**args)`, refused by name where rlx cannot drive it."""
    import verifiers as vf

    if not callable(getattr(module, "load_environment", None)):
        raise ValueError(f"env.id={env_id!r}: module {module.__name__} has no load_environment function")
    env = module.load_environment(**args)
    if not isinstance(env, vf.Environment):
        raise ValueError(f"env.id={env_id!r}: load_environment returned a {type(env).__name__}, not a vf.Environment")
    if env.message_type != "chat":
        raise ValueError(f"env.id={env_id!r}: message_type={env.message_type!r}; rlx drives chat environments only "
                         f"(their calls are rendered with the policy's chat template)")
    if getattr(env, "interleaved_rollouts", False):
        raise ValueError(f"env.id={env_id!r}: interleaved_rollouts=True calls prime-rl's token endpoint; rlx's client "
                         f"keeps every episode's tokens itself, so leave it off")
    return env


def rows(env, split: str) -> list[dict]:
    """The environment's rows of `split` (train: its dataset; eval: its eval_dataset, [] when it has none),
    each cut to what a rollout reads (INPUT_KEYS)."""
    data = env.build_dataset() if split == "train" else env.build_eval_dataset()
    if data is None:
        return []
    return [{k: row[k] for k in INPUT_KEYS if k in row} for row in data]


def clean(messages) -> list[dict]:
    """Chat messages without None-valued keys (a dataset's column of messages gives every message every key)."""
    return [{k: v for k, v in dict(m).items() if v is not None} for m in messages]


def render(tok, messages, tools=None, generation_prompt: bool = True) -> str:
    """`messages` through the policy's chat template (with the environment's tool schemas, if any)."""
    kwargs = {"tools": tools} if tools else {}
    return tok.apply_chat_template(clean(messages), add_generation_prompt=generation_prompt, tokenize=False, **kwargs)
