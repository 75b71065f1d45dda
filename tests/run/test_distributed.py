"""Data parallelism under torchrun (gloo on CPU): 2 ranks train what 1 process trains on the same global
batch, and rank 0 alone writes: two nodes with AQN, a NExt jump, the no-positive-resampling curriculum, stale data
and the shared-prefix forward; DDP with full fine-tuning, killed with kill -9 and resumed; one vLLM engine per
rank. (FSDP2, a rank that raises and the resume after it: the resume matrix, tests/run/test_resume_matrix.py.)

Each test launches real processes (`torchrun --nproc_per_node=2 -m rlx.train ...`), one thread each; the
one-process references run in the test's own process."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlx.train import TIMING_PREFIXES
from tests import procs

pytestmark = pytest.mark.integration

# micro_batch_size 6 over 5 prompts x 8 completions: 7 micro-batches, so both ranks compute (4 + 3, one dead)
ARGS = ["logger=disabled", "trainer.threads=1", "trainer.dtype=fp32",  # fp32 on every CPU kind: the float noise below
        "train.progress=false", "train.eval_every=2", "train.ckpt_every=2", "algo.micro_batch_size=6",
        "rollout.prompts_per_step=5"]
STEPS = 6
# timings and quantities of float-noise size (|trainer - rollout| log-prob gaps are ~1e-7 in both runs)
SKIP = TIMING_PREFIXES + ("rollout/logprob_diff/", "rollout_corr/", "sampling/")
# decided by samples and rewards: must be equal, not close
EXACT = ("train/reward", "train/rewards/", "train/pass_rate", "train/frac_reward_zero_std", "val/", "response_length/",
         "train/num_sequences", "perf/compute/tokens")


def _env():
    env = dict(os.environ, OMP_NUM_THREADS="1", HYDRA_FULL_ERROR="1")
    env.setdefault("RLX_CACHE", str(Path(__file__).resolve().parents[2] / "outputs" / "cache"))
    return env


def _cmd(nproc: int, run_dir: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", "-m",
            "rlx.train", *ARGS, f"hydra.run.dir={run_dir}", *extra]


def _run(nproc: int, run_dir: Path, *extra: str, timeout: float = 400):
    """`torchrun --nproc_per_node=nproc -m rlx.train ...`; nproc 1 is the one-process reference, run in this
    process (the config `python -m rlx.train` composes, without a process start: ~8 s of imports each)."""
    if nproc == 1:
        from rlx.train import run
        from tests.conftest import compose

        run(compose(ARGS + list(extra)), run_dir)
        return None
    out = subprocess.run(_cmd(nproc, run_dir, *extra), env=_env(), capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-6000:]
    return out


def _rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def assert_same_run(one: list[dict], two: list[dict], steps, rel: float = 1e-5) -> None:
    """Rewards, samples and evaluations identical; losses and gradient norms within `rel` relative
    (1e-8 absolute for values that are 0 in one run: a loss of exactly 0 from a zero-advantage batch)."""
    by_step = {r["step"]: r for r in two}
    for a in one:
        if a["step"] not in steps:
            continue
        b = by_step[a["step"]]
        assert set(a) == set(b), (a["step"], set(a) ^ set(b))
        for k, u in a.items():
            if k.startswith(SKIP) or u is None:
                continue
            v = b[k]
            if k.startswith(EXACT) or not isinstance(u, float):
                assert u == v, (a["step"], k, u, v)
            else:
                assert abs(u - v) <= rel * max(abs(u), abs(v)) + 1e-8, (a["step"], k, u, v)


# AQN noise (sampling policy), a NExt jump, ScaleRL's no-positive-resampling curriculum, stale off-policy data and
# the shared-prefix forward (each group's prompt once): every rank must apply the same noise, take the same jump,
# retire the same prompts and deal the same micro-batches (or the weights, checked at every checkpoint, and the
# batches would differ)
# The old full-width split: with the lean defaults (length bins, chunked head) the two runs' update
# agrees to float noise as before, but NExt's predictor (trained 20 epochs on those records) turned
# that noise into a 1.6e-4 relative gap in extrap/predictor_loss at step 3 (open, see docs/lean.md)
FEATURES = ["algo.micro_batch_tokens=0", "algo.logprob_chunk=0", "noise=aqn", "noise.stages=2", "extrapolation=next",
            "extrapolation.interval=1", "extrapolation.horizon=2", "extrapolation.extend_at=[3]",
            "extrapolation.epochs=20", "algo.no_positive_resampling=true", "rollout.mode=stale",
            "rollout.max_staleness=1", "algo.shared_prefix=true", "train.steps=5"]

# full fine-tuning trains the head outside the DDP-wrapped decoder: its gradient is reduced by hand to what DDP
# gives the others (without that it was summed loss_scale = 2 times: grad_norm 1.569 instead of 1.015 at step 1)
FULL = ["model.finetune=full", "algo.lr=1e-4"]


def _two_nodes(run_dir: Path, *extra: str, timeout: float = 400) -> list[subprocess.CompletedProcess]:
    """Two torchrun agents, `--nnodes 2 --node_rank 0/1`, one rank each, meeting on 127.0.0.1: a two-node job
    on one machine, where both ranks have LOCAL_RANK 0 (and LOCAL_WORLD_SIZE 1) and only RANK tells them apart."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    agent = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc_per_node=1", "--master_addr=127.0.0.1",
             f"--master_port={port}"]
    procs = [subprocess.Popen(agent + [f"--node_rank={node}", "-m", "rlx.train", *ARGS, f"hydra.run.dir={run_dir}", *extra],
                              env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for node in (0, 1)]
    try:
        outs = [subprocess.CompletedProcess(p.args, 0, *p.communicate(timeout=timeout)) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, out in zip(procs, outs):
        out.returncode = p.returncode
        assert p.returncode == 0, out.stdout[-3000:] + out.stderr[-6000:]
    return outs


def test_two_nodes_of_one_rank_each_train_what_one_process_trains(tmp_path):
    _run(1, tmp_path / "one", *FEATURES)
    d = tmp_path / "nodes"
    _two_nodes(d, *FEATURES)
    one, rows = _rows(tmp_path / "one"), _rows(d)
    assert any(k.startswith("noise/") for r in one for k in r) and any(k.startswith("extrap/") for r in one for k in r)
    assert [r["step"] for r in rows] == list(range(6))  # rank 0 alone wrote, each step once
    # a NExt jump at step 3 and two more AdamW steps carry the two-rank reduction's float noise on
    # (CI on an AVX2-only CPU saw 1.07e-5 relative in step 5's grad_norm), as FSDP's do
    # (tests/run/test_resume_matrix.py)
    assert_same_run(one, rows, range(6), rel=5e-5)
    summary = json.loads((d / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["world_size"] == 2
    assert sorted(p.name for p in (d / "ckpt").iterdir()) == ["step_4", "step_5"]
    assert (d / "train.log").read_text().count("[done]") == 1  # one console: node 1's rank is not a rank 0


def test_kill_9_of_two_ranks_then_rerun_resumes_and_trains_what_one_process_trains(tmp_path):
    """DDP with full fine-tuning: torchrun and both ranks killed with kill -9 after step 3 is logged, then the
    same command again: it resumes from a checkpoint before the last step, and the run equals one process's
    uninterrupted run."""
    _run(1, tmp_path / "one", f"train.steps={STEPS}", *FULL)
    d = tmp_path / "ddp" / "run"
    proc = subprocess.Popen(_cmd(2, d, f"train.steps={STEPS}", *FULL), env=_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.time() + 300
        while time.time() < deadline:  # wait until step 3 is logged: step_2 is checkpointed, step_6 not yet
            m = d / "metrics.jsonl"
            if m.exists() and any(json.loads(line)["step"] >= 3 for line in m.read_text().splitlines() if line.strip()):
                break
            assert proc.poll() is None, "the run ended before it could be killed"
            time.sleep(0.01)
        below = procs.descendants(proc.pid)
        for pid in [proc.pid] + below:  # torchrun and both ranks (and anything they started), no cleanup
            os.kill(pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert len(below) >= 2, below  # the two ranks were found (and killed)
    deadline = time.time() + 30
    while any(procs.alive(p) for p in below):
        assert time.time() < deadline, [p for p in below if procs.alive(p)]
        time.sleep(0.05)
    done = json.loads((d / "summary.json").read_text())["status"] if (d / "summary.json").exists() else "running"
    assert done == "running" and "[done]" not in (d / "train.log").read_text()  # killed mid-run
    out = _run(2, d, f"train.steps={STEPS}", *FULL)
    assert re.search(r"\[resume\] from \S+/ckpt/step_[24] ", out.stdout + out.stderr)  # not the last step's
    one, rows = _rows(tmp_path / "one"), _rows(d)
    assert [r["step"] for r in rows] == list(range(STEPS + 1))  # each step once after the resume
    assert one[1]["actor/grad_norm"] > 0
    assert_same_run(one, rows, range(STEPS + 1))
    summary = json.loads((d / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["world_size"] == 2
    # rank 0 alone writes: each step's line once after the resume's, no other rank's run dir left behind
    log = (d / "train.log").read_text()
    assert log.count(f"[step {STEPS}/{STEPS}]") == 1 and log.count("[done]") == 1
    assert sorted(p.name for p in d.parent.iterdir()) == ["run"]
    assert sorted(p.name for p in (d / "ckpt").iterdir()) == [f"step_{s}" for s in (4, 6)]  # keep_last 2


def test_torchrun_with_multirun_is_refused(tmp_path):
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=1", "-m",
                          "rlx.train", "-m", "seed=0,1", f"hydra.sweep.dir={tmp_path}", *ARGS],
                         env=_env(), capture_output=True, text=True, timeout=200)
    assert out.returncode != 0 and "every rank would launch the whole sweep" in out.stdout + out.stderr


# the suite's vLLM model (head_dim 32: vLLM's CPU attention needs >= 32); one vLLM engine per rank
VLLM = ["rollout=vllm", "model.hidden_size=64", "model.num_heads=2", "model.num_kv_heads=1", "task.num_terms=2",
        "task.max_operand=6", "task.n_train=60", "task.n_eval=12", "model.sft.steps=60", "train.steps=3"]


def test_vllm_per_rank_samples_what_one_vllm_engine_samples(tmp_path):
    _run(1, tmp_path / "one", *VLLM)
    _run(2, tmp_path / "two", *VLLM)
    assert_same_run(_rows(tmp_path / "one"), _rows(tmp_path / "two"), range(4))


# multi-turn episodes on both ranks: the calculator environment wraps each rank's engine (before the torchrun
# wrap), each rank runs its share of the episodes, and the environment's counts and env_reward are gathered;
# the SFT base calls the tool in half of its demonstrations, so the episodes hold tool calls and replies
CALC = ["model.sft.steps=300", "model.sft.demo_prefix='<calc>1</calc>'", "model.sft.demo_prefix_frac=0.5",
        "env=calculator", "env.instructions=''", "rollout.max_new_tokens=64", "rollout.eval_k=0"]


@pytest.mark.slow  # two SFT-base builds and four engines: ~3 min on 2 cores
def test_calculator_episodes_on_two_ranks_train_what_one_process_trains(tmp_path):
    _run(1, tmp_path / "one", *VLLM, *CALC)
    _run(2, tmp_path / "two", *VLLM, *CALC)
    one, two = _rows(tmp_path / "one"), _rows(tmp_path / "two")
    steps = [r for r in one if r["step"] > 0]
    assert steps and all(r["env/tool_calls/mean"] > 0 and r["env/env_tokens/mean"] > 0 for r in steps)
    assert_same_run(one, two, range(4))


def test_slurm_tasks_become_torch_distributed_ranks():
    from rlx.run.distributed import env_from_slurm

    slurm = {"SLURM_PROCID": "5", "SLURM_NTASKS": "16", "SLURM_STEP_NUM_TASKS": "16", "SLURM_LOCALID": "1",
             "SLURM_JOB_NODELIST": "gpu[03-04]", "SLURM_JOB_ID": "123456"}
    got = env_from_slurm(slurm, first_host=lambda nodes: {"gpu[03-04]": "gpu03"}[nodes])
    assert got == {"RANK": "5", "WORLD_SIZE": "16", "LOCAL_RANK": "1", "MASTER_ADDR": "gpu03", "MASTER_PORT": "29956"}
    assert env_from_slurm({**slurm, "WORLD_SIZE": "16"}) == {}  # torchrun's variables win
    assert env_from_slurm({**slurm, "SLURM_STEP_NUM_TASKS": "1"}) == {}  # one task: one process
    no_step = {k: v for k, v in slurm.items() if k != "SLURM_STEP_NUM_TASKS"}
    assert env_from_slurm(no_step) == {}  # python in an allocation of 16 tasks, not started by srun: one process
    with pytest.raises(RuntimeError, match="SLURM_JOB_NODELIST"):
        env_from_slurm({k: v for k, v in slurm.items() if k != "SLURM_JOB_NODELIST"})


@pytest.mark.parametrize("extra,match", [
    (["rollout.mode=async", "rollout.max_staleness=2"], "rollout.mode=async with 2 processes"),
    (["trainer.strategy=fsdp", "noise=aqn"], "trainer.strategy=fsdp with noise=aqn"),
    (["trainer.strategy=fsdp", "rollout.mode=stale"], "trainer.strategy=fsdp with rollout.mode=stale"),
])
def test_what_ranks_cannot_do_is_refused_before_any_work(extra, match):
    from rlx.config.preflight import check_distributed
    from tests.conftest import compose

    with pytest.raises(ValueError, match=match):
        check_distributed(compose(extra), world_size=2)
    check_distributed(compose(extra), world_size=1)  # one process: all of it is fine
