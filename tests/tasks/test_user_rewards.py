"""Reward functions by import path (TRL's convention): called with the dataset's columns in a bounded
worker, logged under their own names, refused before any model is built when unusable."""

import json
import time

import pytest
from omegaconf import OmegaConf

from rlx.tasks.config import TaskConfig
from rlx.tasks import build_task, check_task_config
from rlx.tasks.user_rewards import RewardFunctionError
from tests.conftest import read_metrics, run_tiny

FNS = "tests.tasks.reward_fns"


def _cfg(rewards, **kw):
    base = {"name": "arith", "n_train": 20, "n_eval": 4, "max_operand": 9}
    return OmegaConf.merge(OmegaConf.structured(TaskConfig), {"rewards": rewards}, {**base, **kw})


def _calls(path):
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.integration
def test_called_with_columns_none_is_left_out(tmp_path, monkeypatch):
    log = tmp_path / "calls.jsonl"
    monkeypatch.setenv("RLX_TEST_REWARD_LOG", str(log))
    t = build_task(_cfg({"correct": 1.0, f"{FNS}:matches_answer": 0.5}))
    e = t.train[0]
    skip = type(e)(key="s", prompt="1+1=", answer="skip")
    per = t.score([e, e, skip], [e.answer, "x", "y"])
    # the registered function under its name, the imported one under the function's name; None -> NaN
    assert per["correct"] == [1.0, 0.0, 0.0]
    assert per["matches_answer"][:2] == [1.0, 0.0] and per["matches_answer"][2] != per["matches_answer"][2]
    assert t.total_reward(per) == [1.5, 0.0, 0.0]  # the NaN adds nothing
    assert t.reward_metrics(per) == {"train/rewards/correct": 1 / 3, "train/rewards/matches_answer": 0.5}
    (call,) = _calls(log)
    assert call["fn"] == "matches_answer" and call["n"] == 3
    assert call["kwargs"] == ["answer", "prompts"] and call["answer"] == [e.answer, e.answer, "skip"]


@pytest.mark.integration
def test_a_hang_is_cut_at_the_time_bound_and_counted():
    t = build_task(_cfg({f"{FNS}:hangs": 1.0, f"{FNS}:short": 1.0}, reward_timeout_s=1.0))
    e = t.train[0]
    t0 = time.time()
    per = t.score([e, e], ["1", "12345"])
    took = time.time() - t0
    assert per["hangs"] == [0.0, 0.0] and per["short"] == [1.0, 0.0]  # the worker came back for `short`
    assert took < 30, took  # start-up (imports) + 1 s bound + restart; never the hang
    assert t.reward_stats()["train/reward_timeouts"] == 1


@pytest.mark.integration
def test_a_raising_or_malformed_function_stops_with_its_reason():
    t = build_task(_cfg({f"{FNS}:raises": 1.0}))
    with pytest.raises(RewardFunctionError, match="(?s)raises.*KeyError.*no such column"):
        t.score(t.train[:2], ["1", "2"])
    t = build_task(_cfg({f"{FNS}:wrong_length": 1.0}))
    with pytest.raises(RewardFunctionError, match="returned 1 values for 2 completions"):
        t.score(t.train[:2], ["1", "2"])


@pytest.mark.parametrize("spec,why", [
    ("tests.tasks.no_such_module:f", "cannot import module 'tests.tasks.no_such_module'"),
    (f"{FNS}:missing", "has no attribute 'missing'"),
    (f"{FNS}:NOT_A_FUNCTION", "is a int, not a function"),
    (f"{FNS}:no_kwargs", r"needs `\*\*kwargs`"),
    ("__main__:f", "__main__"),
    ("nope", "unknown reward function"),
])
def test_unusable_entries_are_refused_by_name(spec, why):
    with pytest.raises(ValueError, match=why):
        check_task_config(_cfg({spec: 1.0}))


def test_a_required_column_the_data_lacks_is_named():
    with pytest.raises(ValueError, match=r"needs_level' needs the column\(s\) \['level'\], which the training split"):
        build_task(_cfg({f"{FNS}:needs_level": 1.0}))
    with pytest.raises(ValueError, match="both be logged as train/rewards/short"):
        check_task_config(_cfg({f"{FNS}:short": 1.0, f"{FNS}.short": 1.0}))


@pytest.mark.integration
def test_run_logs_an_imported_reward_from_the_command_line(tmp_path, monkeypatch):
    log = tmp_path / "calls.jsonl"
    monkeypatch.setenv("RLX_TEST_REWARD_LOG", str(log))
    # the dotted form is the one a Hydra command line can carry ({a.b.c: w}); YAML files may use a.b:c
    run_tiny(tmp_path / "run", ["task.rewards={correct:1.0,tests.tasks.reward_fns.short:0.25}", "train.steps=2",
                                "logger.completions_every=0"])
    rows = read_metrics(tmp_path / "run")
    assert all("train/rewards/short" in r and "train/rewards/correct" in r for r in rows if r["step"] > 0)
    calls = _calls(log)
    assert calls and all(c["kwargs"] == ["answer", "prompts"] for c in calls)
    assert {c["n"] for c in calls} >= {16}  # training batches: prompts_per_step 4 x group_size 4


@pytest.mark.integration
@pytest.mark.parametrize("reward,why", [("tests.tasks.reward_fns.nope", "has no attribute 'nope'"),
                                        ("tests.tasks.reward_fns.no_kwargs", "no_kwargs"),
                                        ("tests.tasks.reward_fns.needs_level", "level")])
def test_bad_reward_fails_before_any_model_is_built(tmp_path, monkeypatch, reward, why):
    import rlx.train

    def no_model(*a, **k):
        raise AssertionError("a model was built")

    monkeypatch.setattr(rlx.train, "build_policy", no_model)
    t0 = time.time()
    with pytest.raises(ValueError, match=why):
        run_tiny(tmp_path, [f"task.rewards={{{reward}:1.0}}"])
    assert time.time() - t0 < 20 and not (tmp_path / "ckpt").exists() and not (tmp_path / "metrics.jsonl").exists()
