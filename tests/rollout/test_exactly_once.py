"""Exactly once across kill -9 (issue 27): an asynchronous run killed at many points and resumed each time
trains on every prompt of the task's stream once, and logs every step once.

The property, checked on the run directory the crashes leave: metrics.jsonl holds steps 0..S once each
and the prompt ledger (prompts.jsonl) steps 1..S; the stream indices the ledger lists and those the
last checkpoint still holds to generate (the async schedule's queue, `redo`) are disjoint, without
repeats, and together exactly 0..P-1, P being where the task's stream stands in that checkpoint
(epoch x train size + position). So no prompt is trained on twice or lost, in any epoch: the task
has 24 training prompts, and the runs draw two epochs and more.

The kills are real SIGKILLs of a process running `rlx.train.run` (tests/rollout/crash_chain.py: a
forked child per attempt), at points drawn from a seed anywhere in a step, mid-checkpoint included.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rlx.run.checkpoint import read_state
from tests.conftest import ROOT, read_metrics

pytestmark = pytest.mark.integration

N_TRAIN = 24
ASYNC = ["rollout.mode=async", "rollout.max_staleness=1", f"task.n_train={N_TRAIN}", "train.ckpt_every=1",
         "train.eval_every=100", "rollout.eval_k=0"]
HEAD_DIM_32 = ["model.hidden_size=64", "model.num_heads=2"]  # vLLM's CPU attention needs head_dim >= 32


def crash_chain(run_dir, kills: int, seed: int, overrides: list[str], timeout_s: float = 900) -> dict:
    out = subprocess.run([sys.executable, "-m", "tests.rollout.crash_chain", str(run_dir), str(kills), str(seed),
                          *overrides], cwd=ROOT, capture_output=True, text=True, timeout=timeout_s)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def assert_exactly_once(run_dir, steps: int, result: dict, kills: int) -> list[dict]:
    logs = "\n".join(p.read_text()[-2000:] for p in sorted(run_dir.glob("child-*.log")))
    assert result["codes"] == [0], logs  # every child was killed but the last, which finished
    assert len(result["kills"]) == kills, result
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "finished"
    rows = read_metrics(run_dir)
    assert [r["step"] for r in rows] == list(range(steps + 1))  # each step logged once
    ledger = [json.loads(line) for line in (run_dir / "prompts.jsonl").read_text().splitlines()]
    assert [r["step"] for r in ledger] == list(range(1, steps + 1))
    trained = [i for r in ledger for i in r["index"]]
    last = read_state(run_dir / "ckpt" / f"step_{steps}")
    pending = [int(i) for i in last["schedule"]["redo"]]
    drawn = last["task"]["epoch"] * N_TRAIN + last["task"]["pos"]
    assert len(set(trained)) == len(trained), "a prompt was trained on twice"
    assert not set(trained) & set(pending), "a prompt both trained on and still pending"
    assert sorted(trained + pending) == list(range(drawn)), "a prompt drawn from the stream was lost"
    assert drawn > N_TRAIN  # the stream wrapped: the property held across an epoch boundary
    return rows


@pytest.mark.parametrize("policy, extra", [("pace", []), ("drop", ["rollout.queue_batches=4"])])
def test_async_run_killed_at_ten_points_trains_each_prompt_once(tmp_path, policy, extra):
    """hf engine, 10 kills per staleness policy (20 crash points in all), 30 steps. Under `drop` the generator runs
    4 batches ahead of a staleness bound of 1, so groups go stale, are dropped and generated again."""
    steps = 30  # 10 kills advance the run by at most ~3 steps each (crash_chain.py): the last child finishes it
    over = ASYNC + [f"rollout.staleness_policy={policy}", f"train.steps={steps}", *extra]
    result = crash_chain(tmp_path, 10, seed={"pace": 0, "drop": 1}[policy], overrides=over)
    rows = assert_exactly_once(tmp_path, steps, result, 10)
    if policy == "drop":
        assert sum(r.get("rollout/dropped_stale_groups", 0) for r in rows) > 0  # the redo path was taken


@pytest.mark.slow
def test_async_multi_turn_run_killed_at_five_points_trains_each_prompt_once(tmp_path):
    """The same property with episodes (env=calculator, hf engine): an SFT base whose demonstrations call the
    calculator (`<calc>1</calc>`) makes multi-turn episodes, which the async generator keeps in its queue
    across kills like single-turn groups; 5 kills, 15 steps. Slow (862 s on 2 cores busy with three
    SmolLM2 runs, at nice 15): each crash point rebuilds the policy and its engine; the fast test above covers
    the schedule's logic, which the episode wrapper (an engine adapter) does not change."""
    steps = 15
    calc = ["env=calculator", "env.instructions=''", "model.sft.steps=300", "model.sft.demo_prefix='<calc>1</calc>'",
            "model.sft.demo_prefix_frac=0.5", "task.num_terms=2", "task.max_operand=6", "rollout.max_new_tokens=64"]
    result = crash_chain(tmp_path, 5, seed=3, overrides=ASYNC + calc + [f"train.steps={steps}"], timeout_s=1800)
    rows = assert_exactly_once(tmp_path, steps, result, 5)
    assert sum(r.get("env/tool_calls/mean", 0) > 0 for r in rows) >= 3  # the trained-on episodes called the tool


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["vllm", "vllm_server"])
@pytest.mark.parametrize("policy", ["pace", "drop"])
def test_async_run_on_vllm_killed_and_resumed_trains_each_prompt_once(tmp_path, engine, policy):
    """The same property on the colocated vLLM engine and on a local vLLM server (which its watchdog
    kills with each child; the resumed child starts a new one), 3 kills each: slow (an engine start
    per crash point); the fast test above covers the schedule's logic, which no engine changes."""
    pytest.importorskip("vllm")
    steps = 10
    over = ASYNC + HEAD_DIM_32 + [f"rollout={engine}", f"rollout.staleness_policy={policy}", f"train.steps={steps}",
                                  *(["rollout.queue_batches=4"] if policy == "drop" else [])]
    result = crash_chain(tmp_path, 3, seed=2, overrides=over, timeout_s=1800)
    assert_exactly_once(tmp_path, steps, result, 3)
