"""Rewards bounded on every call (issue 31): a call's deadline counts from the moment a READY worker
gets it, a killed worker is replaced at once by a standby, a small pool scores a batch in parallel, and
a worker that dies mid-call scores 0, is counted and restarted, one that dies before it is ready costs
no message, and a set-up that always dies is an error naming the pool and the exit status."""

import json
import time

import pytest

from rlx.tasks.workers import WorkerPool, WorkerSetupError
from tests.tasks import worker_targets as W

pytestmark = pytest.mark.integration

# completions on which math-verify never returns (a big-integer power inside C), whole-expression parsed
HOSTILE = [r"\boxed{10^{10^{10^{10}}}}", r"\boxed{9^{9^{9^{9}}}}", r"#### 10^{10^{10^{10}}}", r"\boxed{8^{8^{8^{8}}}}"]
T = 2.0  # task.reward_timeout_s of these tests
STARTUP = 10.0  # a generous allowance for one worker start-up (imports) on a loaded 2-core machine


def _gsm8k_task(tmp_path, timeout_s=T):
    from omegaconf import OmegaConf

    from rlx.tasks.config import TaskConfig
    from rlx.tasks import build_task

    p = tmp_path / "g.jsonl"
    p.write_text(json.dumps({"question": "q", "answer": "#### 1"}) + "\n")
    return build_task(OmegaConf.merge(OmegaConf.structured(TaskConfig), {
        "name": "file", "train_path": str(p), "eval_path": str(p), "answer_regex": r"####\s*(.+)\s*$",
        "n_train": 0, "n_eval": 0, "rewards": {"math_verify": 1.0}, "reward_timeout_s": timeout_s}))


def test_hostile_batch_costs_about_the_timeout_each_plus_one_start_up(tmp_path):
    from rlx.tasks import verify

    verify._DEFAULT = None  # a cold verifier: the batch pays the one start-up
    t = _gsm8k_task(tmp_path)
    ex = t.train[0]
    t0 = time.time()
    per = t.score([ex] * (len(HOSTILE) + 1), HOSTILE + ["#### 1.0"])
    cold = time.time() - t0
    assert per["math_verify"] == [0.0] * len(HOSTILE) + [1.0]
    assert t.reward_stats()["train/reward_timeouts"] == len(HOSTILE)
    # main: each hostile call waited timeout + the 60 s start-up allowance (65 s at the default 5 s)
    assert cold <= len(HOSTILE) * T + STARTUP, cold
    t0 = time.time()  # warm: no start-up at all per timeout (the standby takes over, the pool goes on)
    per = t.score([ex] * len(HOSTILE), HOSTILE)
    warm = time.time() - t0
    assert per["math_verify"] == [0.0] * len(HOSTILE) and t.reward_stats()["train/reward_timeouts"] == len(HOSTILE)
    assert warm <= len(HOSTILE) * T + 1.0, warm
    assert t.score([ex], ["#### 1"])["math_verify"] == [1.0]


def test_the_first_call_is_bounded_by_the_timeout_not_the_start_up_allowance(tmp_path):
    from rlx.tasks import verify

    verify._DEFAULT = None
    t = _gsm8k_task(tmp_path)
    t0 = time.time()
    assert t.score(t.train, [HOSTILE[0]])["math_verify"] == [0.0]
    assert time.time() - t0 <= T + STARTUP  # main: T + 60 s


def test_start_up_is_not_part_of_a_calls_deadline():
    pool = WorkerPool(W.slow_start, size=1, spares=0, timeout_s=1.0, startup_s=30.0)
    t0 = time.time()
    assert pool.map(["a", "b"]) == [("ok", "a"), ("ok", "b")]  # 3 s of set-up > the 1 s deadline: still answered
    assert time.time() - t0 >= 3.0 and pool.pop_stats() == {"timeouts": 0, "refused": 0, "errors": 0}
    pool.close()


def test_one_hang_does_not_serialise_the_rest_of_the_batch():
    pool = WorkerPool(W.echo, size=2, spares=1, timeout_s=2.0)
    pool.map(["warm"])
    t0 = time.time()
    out = pool.map(["hang"] + [str(i) for i in range(20)])
    took = time.time() - t0
    assert out == [None] + [("ok", str(i)) for i in range(20)]
    assert took < 2.0 + 1.0, took  # the 20 others were answered while the hang ran out its 2 s
    assert pool.pop_stats()["timeouts"] == 1
    pool.close()


@pytest.mark.parametrize("delay", [0.0, 0.5])  # dead before or after our message reached its pipe
def test_a_set_up_that_always_dies_is_an_error_not_zero_rewards(delay):
    # main scored one pending message 0 per death and restarted forever: [None, None, None], training on
    # zero rewards; now the 3rd start-up death in a row (no worker ever ready) stops the batch by name
    pool = WorkerPool(W.exits_at_start, delay, size=1, spares=1, timeout_s=5.0, name="rlx-test-pool")
    t0 = time.time()
    with pytest.raises(WorkerSetupError, match=r"rlx-test-pool: 3 workers in a row died while starting.*"
                                               r"exited with code 1"):  # never BrokenPipeError / ConnectionResetError
        pool.map(["a", "b", "c"])
    assert pool.pop_stats()["errors"] == 3 and time.time() - t0 < 30
    pool.close()


def test_a_segfault_at_start_up_is_named():
    pool = WorkerPool(W.segfaults_at_start, size=1, spares=0, timeout_s=5.0)
    with pytest.raises(WorkerSetupError, match=r"rlx-worker: 3 workers in a row .*killed by SIGSEGV \(-11\)"):
        pool.ask("a")
    pool.close()


def test_a_worker_that_dies_at_start_up_costs_no_message(tmp_path):
    # the first of the two workers dies before READY, holding no message: all three are answered by the other
    # (main scored a pending message 0 for it, one it never received: "a" or "b" came back None)
    pool = WorkerPool(W.dies_once_at_start, str(tmp_path / "died"), size=1, spares=1, timeout_s=5.0)
    assert pool.map(["a", "b", "c"]) == [("ok", "a"), ("ok", "b"), ("ok", "c")]
    assert pool.pop_stats() == {"timeouts": 0, "refused": 0, "errors": 1}
    pool.close()


def test_a_user_reward_whose_import_segfaults_names_the_reward():
    from rlx.tasks.user_rewards import RewardFunctionError, UserRewards

    spec = "tests.tasks.crash_reward:score"
    rewards = UserRewards([spec], timeout_s=5.0)
    with pytest.raises(RewardFunctionError, match=r"(?s)could not start \(importing \['tests.tasks.crash_reward:score'"
                                                  r"\]\).*3 workers in a row died.*SIGSEGV"):
        rewards(spec, {"completions": ["1"], "prompts": ["q"]})
    rewards.close()


def test_a_worker_that_dies_mid_call_scores_zero_and_the_rest_go_on():
    pool = WorkerPool(W.echo, size=1, spares=1, timeout_s=5.0)
    assert pool.map(["a", "die", "b"]) == [("ok", "a"), None, ("ok", "b")]
    assert pool.pop_stats() == {"timeouts": 0, "refused": 0, "errors": 1}
    pool.close()


def test_a_set_up_that_raises_is_an_error_with_its_traceback():
    pool = WorkerPool(W.setup_raises, size=1, spares=0, timeout_s=5.0)
    with pytest.raises(WorkerSetupError, match="(?s)set-up raised.*missing_dependency"):
        pool.map(["a"])
    pool.close()


def test_after_a_user_reward_timeout_the_next_call_needs_no_start_up(tmp_path, monkeypatch):
    from omegaconf import OmegaConf

    from rlx.tasks.config import TaskConfig
    from rlx.tasks import build_task

    log = tmp_path / "calls.jsonl"
    monkeypatch.setenv("RLX_TEST_REWARD_LOG", str(log))
    t = build_task(OmegaConf.merge(OmegaConf.structured(TaskConfig), {
        "name": "arith", "n_train": 8, "n_eval": 2, "reward_timeout_s": 1.0,
        "rewards": {"tests.tasks.reward_fns:hangs": 1.0, "tests.tasks.reward_fns:stamp": 1.0}}))
    e = t.train[0]
    t.score([e], ["1"])  # cold start (the imports) and one timeout
    for _ in range(3):
        t0 = time.time()
        per = t.score([e], ["1"])  # `hangs` is killed at t0 + 1 s, then `stamp` is called
        assert per == {"hangs": [0.0], "stamp": [0.0]}
        served = json.loads(log.read_text().splitlines()[-1])
        # the worker that answered `stamp` was started before the hang was cut (a standby, ready); main
        # started a worker after every timeout, so its imports came after t0 + 1 s
        assert served["imported"] < t0 + 1.0, served["imported"] - t0
    assert t.reward_stats()["train/reward_timeouts"] == 4


def test_a_pool_starts_inside_a_joblib_worker():
    # hydra/launcher=joblib runs each job in a loky worker, whose global start method is 'loky': a spawn child
    # re-applies that before importing anything and died ("cannot find context for 'loky'") until the pool named
    # a stdlib method while its child started; the loky worker's own method is given back
    joblib = pytest.importorskip("joblib")
    [(answers, method)] = joblib.Parallel(n_jobs=2, backend="loky")(
        [joblib.delayed(W.pool_in_a_loky_worker)()])
    assert answers == [("ok", "a")]
    assert method == "loky"
