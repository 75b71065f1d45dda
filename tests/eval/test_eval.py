"""rlx-eval (rlx/eval): pass@k and maj@k by hand, the shared evaluation reproducing a run's own val/*
metrics from its checkpoint and the base's step-0 metrics, chunking that changes no completion,
progress lines, and every bad input refused before a model is built."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from rlx.eval import cli
from rlx.eval.guess import spreads_of_rows
from rlx.eval.metrics import default_ks, majority, parse_ks, pass_at_k, set_metrics, vote_key
from rlx.run.records import read_metrics
from tests.conftest import ROOT

# the default tiny model (its SFT base solves a few held-out problems: accuracies strictly between 0 and 1)
RUN = ["task.n_eval=32", "rollout.eval_k=4", "rollout.prompts_per_step=4", "rollout.group_size=4", "trainer.threads=1"]
TRAIN = ["train.steps=2", "train.eval_every=2", "train.progress=false", "logger.mode=disabled"]


# ---- pass@k / maj@k by hand ------------------------------------------------------------------------------
def test_pass_at_k_by_hand():
    # 1 - C(n - c, k) / C(n, k)
    assert pass_at_k(4, 1, 2) == pytest.approx(1 - 3 / 6)  # C(3,2) = 3, C(4,2) = 6: 0.5
    assert pass_at_k(5, 2, 3) == pytest.approx(1 - 1 / 10)  # C(3,3) = 1, C(5,3) = 10: 0.9
    assert pass_at_k(10, 3, 4) == pytest.approx(1 - 35 / 210)  # C(7,4) = 35, C(10,4) = 210: 0.8333
    assert pass_at_k(8, 3, 1) == pytest.approx(3 / 8)  # k = 1: the pass rate c / n
    assert pass_at_k(4, 3, 2) == 1.0  # n - c = 1 < k: every 2 of the 4 hold a pass
    assert pass_at_k(4, 0, 4) == 0.0
    with pytest.raises(ValueError, match="k <= n"):
        pass_at_k(4, 1, 5)


def test_set_metrics_by_hand():
    # two prompts, n = 4 samples each, prompt-major
    passed = [True, False, False, False,  # A: c = 1
              True, True, False, True]  # B: c = 3
    answers = ["7", "3", "3", "5",
               "4", "4", "", "9"]
    m = set_metrics(passed, answers, 4, [1, 2, 4])
    assert m["mean_at_n"] == 4 / 8
    # pass@1 = mean(1/4, 3/4) = 0.5; pass@2 = mean(1 - C(3,2)/C(4,2), 1 - C(1,2)/C(4,2)) = mean(0.5, 1) = 0.75
    # pass@4 = mean(1, 1) = 1
    assert m["pass_at_k"] == pytest.approx({1: 0.5, 2: 0.75, 4: 1.0})
    # maj@1: A "7" passes, B "4" passes -> 1; maj@2: A "7" vs "3" tie, the first seen ("7") passes; B "4" -> 1
    # maj@4: A "3" (2 votes) fails, B "4" (2 votes; the empty answer is no vote) passes -> 0.5
    assert m["maj_at_k"] == {1: 1.0, 2: 1.0, 4: 0.5}


def test_majority_ignores_empty_answers():
    assert majority(["", "", "2"], [False, False, True]) is True  # two empty answers are no votes
    assert majority(["", ""], [False, False]) is False  # no vote at all
    assert majority(["5", "6", "6"], [True, False, False]) is False  # "6" has 2 of 3 votes


def test_majority_counts_one_answer_however_it_is_written():
    from fractions import Fraction

    # "18", "18.0", " 18 " and "**18**." are one answer (4 votes) against "17" (2 votes): the 18s win and the
    # first of them (sample 0) passed; main counted 4 different strings of one vote each, so "17" won (2)
    answers = ["18", "17", "18.0", "17", " 18 ", "**18**."]
    passed = [True, False, True, False, True, True]
    assert majority(answers, passed) is True
    # 18 (as 36/2 and 18) and 17 have 2 votes each; the tie goes to the value seen first, 36/2, which passed
    assert majority(["36/2", "17", "1,000", "17", "18"], [True, False, False, False, True]) is True
    assert majority(["36/2", "17", "18"], [False, True, True]) is False  # 18: 2 votes; the first (36/2) failed
    assert [vote_key(a) for a in ["18", "-3.50", "1,000", ".5", "1/2", "  ", None]] == [
        Fraction(18), Fraction(-7, 2), Fraction(1000), Fraction(1, 2), Fraction(1, 2), None, None]
    # plain numerals only, never evaluated: exponents, sums, hex and malformed groups stay text
    assert [vote_key(a) for a in ["1e1", "2+8", "0x0A", "1,00", "1/0"]] == ["1e1", "2+8", "0x0A", "1,00", "1/0"]
    assert majority(["1e1", "10", "2+8", "10"], [True, False, True, False]) is False  # "10" 2 votes; no 1e1 = 10


def test_ks():
    assert default_ks(1) == [1]
    assert default_ks(4) == [1, 2, 4]
    assert default_ks(6) == [1, 2, 4, 6]
    assert default_ks(0) == []
    assert parse_ks("4,1,4", 4) == [1, 4]
    with pytest.raises(ValueError, match="rollout.eval_k = 4"):
        parse_ks("1,8", 4)


# ---- a finished run and its base -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("evalrun") / "run"
    subprocess.run([sys.executable, "-m", "rlx.train", *RUN, *TRAIN, f"hydra.run.dir={d}"], cwd=ROOT, check=True,
                   capture_output=True, timeout=600)
    return d


def _val(row: dict) -> dict:
    return {k: v for k, v in row.items() if k.startswith("val/")}


@pytest.mark.integration
def test_rlx_eval_reproduces_the_runs_last_val_metrics(run_dir, tmp_path, capsys):
    last = [r for r in read_metrics(run_dir) if "val/acc" in r][-1]
    assert last["step"] == 2 and any(0 < v < 1 for v in (last["val/acc"], last["val/mean_at_k"]))  # informative
    report = cli.main([str(run_dir), "--out", str(tmp_path / "a")])
    assert report["source"] == {"kind": "run", "path": str(run_dir), "checkpoint": str(run_dir / "ckpt" / "step_2"),
                                "step": 2, "label": "step_2"}
    assert report["val"] == _val(last)  # exactly: same engine, prompts, seeds and rewards as training
    s = report["sets"]["default"]
    assert s["acc"] == last["val/acc"] and s["mean_at_n"] == last["val/mean_at_k"]
    assert s["pass_at_k"][1] == pytest.approx(s["mean_at_n"])  # pass@1 is the expected single-sample pass rate
    # the files: results.json is the report, the table names every k, one JSONL row per completion
    assert json.loads((tmp_path / "a" / "results.json").read_text())["val"] == _val(last)
    md = (tmp_path / "a" / "results.md").read_text()
    assert ("| set | prompts | greedy acc | greedy flexible-extract | greedy strict-match | mean@4 | pass@1 | pass@2 | "
            "pass@4 | maj@1 | maj@2 | maj@4 |") in md
    # the benchmark's readings (numeric golds: lm-eval's GSM8K two) are training's val/<reading>, row by row too
    assert s["readings"] == {"flexible-extract": last["val/flexible-extract"], "strict-match": last["val/strict-match"]}
    rows = [json.loads(line) for line in (tmp_path / "a" / "completions.jsonl").read_text().splitlines()]
    assert len(rows) == 32 * (1 + 4) and {r["kind"] for r in rows} == {"greedy", "sample"}
    greedy = [r for r in rows if r["kind"] == "greedy"]
    assert sum(r["passed"] for r in greedy) / 32 == last["val/acc"]
    assert set(rows[0]) >= {"prompt", "completion", "reward", "answer", "gold", "passed", "readings"}
    flexible = [r["readings"]["flexible-extract"]["passed"] for r in greedy]
    assert sum(flexible) / 32 == last["val/flexible-extract"]
    assert "[rlx-eval] step_2: 32 prompts: 32 greedy + 4 x 32 sampled" in capsys.readouterr().out
    # the most common greedy answer (rlx.eval.guess), from the scored set and again from the written rows
    assert s["answers"] == spreads_of_rows(greedy)["default"].as_dict()
    assert s["answers"]["passes"] == sum(r["passed"] for r in greedy)
    assert "| set | most common greedy answer | given to | gold of | passes that are it |" in md


@pytest.mark.integration
def test_training_writes_each_evaluations_problems_as_rlx_eval_does(run_dir, tmp_path):
    """Each of training's evaluations leaves RUN/eval/step_N/{completions.jsonl,results.json,results.md}: the rows
    rlx-eval writes for step N's checkpoint (row for row), and the val/* the run logged; so a paired per-problem
    comparison of two evaluations (rlx.eval.paired) needs no second generation."""
    logged = {r["step"]: _val(r) for r in read_metrics(run_dir) if "val/acc" in r}
    assert sorted(logged) == [0, 2] and sorted(p.name for p in (run_dir / "eval").iterdir()) == ["step_0", "step_2"]
    for step, val in logged.items():
        assert json.loads((run_dir / "eval" / f"step_{step}" / "results.json").read_text())["val"] == val
    cli.main([str(run_dir), "--out", str(tmp_path / "c")])
    mine, theirs = ((d / "completions.jsonl").read_text().splitlines() for d in (run_dir / "eval" / "step_2", tmp_path / "c"))
    assert len(mine) == 32 * (1 + 4) and [json.loads(x) for x in mine] == [json.loads(x) for x in theirs]
    assert "| set | prompts | greedy acc |" in (run_dir / "eval" / "step_0" / "results.md").read_text()


@pytest.mark.integration
def test_rlx_eval_on_the_base_reproduces_step_0(run_dir, tmp_path):
    first = next(r for r in read_metrics(run_dir) if r["step"] == 0)
    report = cli.main([*RUN, "--out", str(tmp_path / "b")])  # no path: the base, composed from conf/
    assert report["source"]["kind"] == "base" and report["source"]["step"] == 0
    assert report["val"] == _val(first)


@pytest.mark.integration
def test_checkpoint_dir_more_samples_and_chunks(run_dir, tmp_path, monkeypatch, capsys):
    """A checkpoint named directly, n = 8 samples: the greedy accuracy is the run's; 3-sequence chunks (every
    chunk boundary inside a prompt's samples) give the same completions as the engine's own batch."""
    from rlx.eval import evaluate

    last = [r for r in read_metrics(run_dir) if "val/acc" in r][-1]
    ckpt = str(run_dir / "ckpt" / "step_2")
    whole = cli.main([ckpt, "rollout.eval_k=8", "--k", "1,8", "--out", str(tmp_path / "whole")])
    monkeypatch.setattr(evaluate, "PROGRESS_EVERY_S", 0.0)  # a progress line after every chunk
    capsys.readouterr()
    chunked = cli.main([ckpt, "rollout.eval_k=8", "rollout.eval_chunk=3", "--k", "1,8", "--out", str(tmp_path / "ch")])
    assert whole["source"]["kind"] == "checkpoint" and whole["val"]["val/acc"] == last["val/acc"]
    assert whole["val"]["val/k"] == 8 and whole["ks"] == [1, 8]
    assert chunked["val"] == whole["val"] and chunked["sets"] == whole["sets"]
    assert (tmp_path / "ch" / "completions.jsonl").read_text() == (tmp_path / "whole" / "completions.jsonl").read_text()
    out = capsys.readouterr().out
    assert "3 per engine call" in out and "[rlx-eval] step_2: 3/288 sequences" in out  # 32 greedy + 8 x 32 sampled
    assert "288/288 sequences" in out and "tok/s" in out and "ETA" in out


@pytest.mark.integration
def test_training_reports_evaluation_progress(run_dir):
    log = (run_dir / "train.log").read_text()
    assert "[eval] step 0: 32 prompts: 32 greedy + 4 x 32 sampled sequences" in log
    assert "[eval] step 2: 32 prompts" in log


# ---- bad input: refused by prepare (which builds nothing) ------------------------------------------------
@pytest.mark.integration
def test_bad_input_is_refused_before_any_model(run_dir, tmp_path):
    (tmp_path / "bare").mkdir()
    with pytest.raises(FileNotFoundError, match=r"\.hydra/config\.yaml is missing"):
        cli.prepare([str(tmp_path / "bare")])
    no_ckpt = tmp_path / "no_ckpt"
    shutil.copytree(run_dir / ".hydra", no_ckpt / ".hydra")
    with pytest.raises(FileNotFoundError, match="no checkpoint in"):
        cli.prepare([str(no_ckpt)])
    with pytest.raises(ValueError, match="every k must be in 1..n"):
        cli.prepare([str(run_dir), "--k", "1,8"])
    with pytest.raises(ValueError, match="rollout.eval_k=0 draws no samples"):
        cli.prepare([str(run_dir), "rollout.eval_k=0", "--k", "1"])
    with pytest.raises(ValueError, match="selects a config group"):
        cli.prepare([str(run_dir), "model=smollm2"])
    with pytest.raises(ValueError, match="rollout.eval_top_p must be in"):
        cli.prepare([*RUN, "rollout.eval_top_p=1.5"])
    with pytest.raises(FileNotFoundError, match="does not exist"):
        cli.prepare([str(tmp_path / "nope")])
    with pytest.raises(SystemExit, match="rlx-eval: error: .*no checkpoint in"):
        cli.main([str(no_ckpt)])


def test_rlx_eval_applies_trainer_threads(monkeypatch):
    import torch

    base = [a for a in RUN if not a.startswith("trainer.threads=")]
    before = torch.get_num_threads()
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the governor's ceiling (rlx.run.threads.share): it can only pick 1
    try:
        torch.set_num_threads(2)
        cli.prepare([*base, "trainer.threads=-1"])  # main left torch at 2 here: -1 was never applied
        assert torch.get_num_threads() == 1
        cli.prepare([*base, "trainer.threads=3"])
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)


@pytest.mark.integration
def test_corrupt_checkpoint_is_refused(run_dir, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(run_dir / ".hydra", bad / ".hydra")
    shutil.copytree(run_dir / "ckpt" / "step_2", bad / "ckpt" / "step_2")
    with open(bad / "ckpt" / "step_2" / "adapter" / "adapter_model.safetensors", "r+b") as f:
        f.truncate(10)
    with pytest.raises(FileNotFoundError, match="no intact checkpoint .*adapter_model.safetensors is corrupt"):
        cli.prepare([str(bad)])
    with pytest.raises(ValueError, match="adapter_model.safetensors is corrupt"):
        cli.prepare([str(bad / "ckpt" / "step_2")])


def test_default_eval_chunks_are_sized_by_speed():
    from rlx.eval.evaluate import CHUNK_TARGET_S, FIRST_CHUNK, next_chunk

    assert next_chunk(512, False, 0, 0.0) == FIRST_CHUNK  # the first call: a small probe
    # 32 rows took 64 s (SmolLM2 on a CPU): 0.5 rows/s -> 15 rows per 30 s, at least FIRST_CHUNK // 2
    assert next_chunk(512, False, 32, 64.0) == max(FIRST_CHUNK // 2, int(32 / 64.0 * CHUNK_TARGET_S))
    assert next_chunk(512, False, 32, 0.1) == 512  # a fast model goes at the engine's full batch
    assert next_chunk(20, True, 100, 1.0) == 20  # rollout.eval_chunk > 0: fixed


def test_on_n_ranks_evaluation_calls_the_engine_with_the_same_sizes(monkeypatch):
    # sized by each process's own clock, two ranks made different engine calls and their collective generation
    # fell apart (FSDP: 'len(examples) == len(completions)' failed on rank 1 under load); by_speed=False (what
    # training passes on N ranks) goes at the engine's whole batch whatever the timing
    from types import SimpleNamespace

    import torch
    from omegaconf import OmegaConf

    from rlx.eval import evaluate as E
    from rlx.rollout.config import RolloutConfig

    calls = []

    class Batch(list):  # what run_eval reads of a RolloutBatch: len, texts, completion_mask
        pass

    class Engine:
        def generate(self, prompts, n, sp, generator, seeds=None):
            calls.append(len(prompts))
            b = Batch(["1"] * len(prompts))
            b.texts, b.completion_mask = list(b), torch.ones(len(prompts), 1)
            return b

    clock = iter(range(0, 10_000, 100))  # every engine call seems to take 100 s: by speed, chunks shrink
    monkeypatch.setattr(E.time, "monotonic", lambda: float(next(clock)))
    rollout = OmegaConf.structured(RolloutConfig(engine="hf", batch_size=64, eval_k=0))
    task = SimpleNamespace(eval_sets={"default": [SimpleNamespace(prompt=f"q{i}", answer="1") for i in range(150)]},
                           score=lambda ex, texts: {"x": [1.0] * len(texts)}, passed=lambda d: [True] * len(d["x"]),
                           total_reward=lambda d: d["x"], cfg={})  # cfg: no task.readings (read by the golds)
    E.run_eval(Engine(), task, rollout, torch.Generator().manual_seed(0), show=False, bar=False)
    assert calls[0] == E.FIRST_CHUNK and calls[1] < 64  # one process: sized by its (slow) clock
    calls.clear()
    E.run_eval(Engine(), task, rollout, torch.Generator().manual_seed(0), show=False, bar=False, by_speed=False)
    assert calls == [64, 64, 22]  # the engine's batch, whatever the clock


def test_evaluation_scores_a_row_cut_at_the_budget_as_cut(tmp_path):
    """The engine's truncation flags reach the task's stated_answer: `#### 1` that the budget stopped on is
    no answer (it may be `#### 16` cut short); the same text finished with eos is."""
    import json

    import torch
    from omegaconf import OmegaConf

    from rlx.eval import evaluate as E
    from rlx.rollout.config import RolloutConfig
    from rlx.tasks import build_task
    from rlx.tasks.config import TaskConfig

    p = tmp_path / "t.jsonl"
    p.write_text("".join(json.dumps({"question": f"q{i}", "answer": "1"}) + "\n" for i in range(4)))
    task = build_task(OmegaConf.merge(OmegaConf.structured(TaskConfig), {
        "name": "file", "train_path": str(p), "eval_path": str(p), "n_train": 0, "n_eval": 0,
        "rewards": {"stated_answer": 1.0}}))

    class Batch(list):
        pass

    class Engine:  # rows 0 and 2 stopped by the budget, 1 and 3 by eos; every text is "#### 1"
        def generate(self, prompts, n, sp, generator, seeds=None):
            b = Batch(["#### 1"] * len(prompts))
            b.texts, b.completion_mask = list(b), torch.ones(len(prompts), 1)
            b.truncated = torch.tensor([int(q[1:]) % 2 == 0 for q in prompts])
            return b

    rollout = OmegaConf.structured(RolloutConfig(engine="hf", batch_size=4, eval_k=0, eval_chunk=4))
    (r,) = E.run_eval(Engine(), task, rollout, torch.Generator().manual_seed(0), show=False, bar=False)
    assert [e.prompt for e in r.examples] == ["q0", "q1", "q2", "q3"] and r.greedy_passed == [False, True, False, True]
    assert [x["passed"] for x in r.greedy_readings["strict-match"]] == [True] * 4  # lm-eval's reading is lm-eval's
