"""task.holdout: a held-out slice carved out of one file (rlx/tasks/files.py), disjoint from train and
fixed by the seed and the question text alone; experiment=smollm2_gsm8k carves it out of real GSM8K
(../shared/data/gsm8k/train.jsonl; those tests skip where ../shared is absent, as in a user's clone)."""

import hashlib
import json
import random

import pytest
from omegaconf import OmegaConf

from rlx.tasks.config import TaskConfig
from rlx.tasks import build_task
from tests.conftest import ROOT, compose

GSM8K = ROOT.parent / "shared" / "data" / "gsm8k" / "train.jsonl"
needs_gsm8k = pytest.mark.skipif(not GSM8K.is_file(), reason=f"{GSM8K} is absent (no ../shared beside the checkout)")

ROWS = [{"question": f"What is {a} plus {a + 1}?", "answer": f"{a} + {a + 1} = {2 * a + 1}\n#### {2 * a + 1}"}
        for a in range(20)]


def write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def task(path, **kw):
    cfg = OmegaConf.merge(OmegaConf.structured(TaskConfig), {
        "name": "file", "train_path": path, "eval_path": None, "answer_regex": r"####\s*(.+)\s*$",
        "rewards": {"correct": 1.0}, "n_train": 0, "n_eval": 0}, kw)
    return build_task(cfg)


def ranked(qs, seed):
    """The documented rule, computed here on its own: sort by sha256 of "<seed>:<question>", the
    question's whitespace runs collapsed to one space."""
    return sorted(qs, key=lambda q: hashlib.sha256(f"{seed}:{' '.join(q.split())}".encode()).hexdigest())


def test_holdout_is_disjoint_sized_and_the_documented_hash_order(tmp_path):
    t = task(write(tmp_path / "d.jsonl", ROWS), holdout=5)
    held, train = [e.prompt for e in t.eval], [e.prompt for e in t.train]
    assert len(held) == 5 and len(train) == 15  # 20 rows = 5 held out + 15 to train on
    assert not set(held) & set(train)
    assert sorted(held + train) == sorted(r["question"] for r in ROWS)  # every row on exactly one side
    assert held == ranked([r["question"] for r in ROWS], 1234)[:5]  # task.seed's default, in rank order
    assert train == [r["question"] for r in ROWS if r["question"] not in held]  # file order
    # each example keeps its file row as key and its gold answer: row a answers 2a + 1
    for e in t.eval + t.train:
        a = int(e.key.split(":")[1])
        assert e.prompt == ROWS[a]["question"] and e.answer == str(2 * a + 1)


def test_the_slice_ignores_file_order_n_train_and_nests_with_n_eval(tmp_path):
    base = task(write(tmp_path / "a.jsonl", ROWS), holdout=6)
    shuffled = ROWS[:]
    random.Random(0).shuffle(shuffled)
    other = task(write(tmp_path / "b.jsonl", shuffled), holdout=6, n_train=3)
    assert [e.prompt for e in other.eval] == [e.prompt for e in base.eval]
    assert len(other.train) == 3 and not {e.prompt for e in other.train} & {e.prompt for e in base.eval}
    fewer = task(write(tmp_path / "c.jsonl", ROWS), holdout=6, n_eval=2)
    assert [e.prompt for e in fewer.eval] == [e.prompt for e in base.eval][:2]
    assert [e.prompt for e in fewer.train] == [e.prompt for e in base.train]  # train is set by holdout alone


def test_another_seed_draws_another_slice(tmp_path):
    path = write(tmp_path / "d.jsonl", ROWS)
    a, b = task(path, holdout=5, seed=1), task(path, holdout=5, seed=2)
    assert [e.prompt for e in b.eval] == ranked([r["question"] for r in ROWS], 2)[:5]
    assert {e.prompt for e in a.eval} != {e.prompt for e in b.eval}


def test_a_repeated_question_is_never_on_both_sides(tmp_path):
    q = ROWS[0]["question"]
    rows = ROWS + [{"question": q.replace(" ", "  ") + " ", "answer": "#### 1"}, dict(ROWS[0])]  # q again, twice
    path = write(tmp_path / "d.jsonl", rows)
    seen = set()
    for holdout in range(1, 20):
        t = task(path, holdout=holdout)
        norm = [" ".join(e.prompt.split()) for e in t.eval], [" ".join(e.prompt.split()) for e in t.train]
        assert not set(norm[0]) & set(norm[1])
        held_q = q in norm[0]
        seen.add(held_q)
        # 22 rows, 20 distinct questions: q's 3 rows go together; held out, it is one eval example
        assert len(t.eval) == holdout and len(t.train) == 22 - holdout - (2 if held_q else 0)
    assert seen == {True, False}  # both cases happened


@pytest.mark.parametrize("kw,needle", [
    ({"holdout": 5, "eval_path": "other.jsonl"}, "task.eval_path is set too"),
    ({"holdout": 5, "n_eval": 6}, "task.n_eval=6 exceeds task.holdout=5"),
    ({"holdout": 20}, r"task.holdout=20 must be in \[1, 19\]"),  # 20 distinct questions: 19 at most
    ({"holdout": -1}, r"task.holdout must be >= 0"),
    ({"holdout": 5, "eval": {"x": {"path": "nope.jsonl"}}}, r"task.eval.x.path: data file not found: nope.jsonl"),
])
def test_bad_holdout_settings_and_missing_files_are_refused_by_name(tmp_path, kw, needle):
    with pytest.raises((ValueError, FileNotFoundError), match=needle):
        task(write(tmp_path / "d.jsonl", ROWS), **kw)


def test_a_missing_file_is_named_with_its_resolved_path(tmp_path, monkeypatch):
    monkeypatch.setenv("RLX_DATA", str(tmp_path / "nowhere"))
    cfg = compose(["experiment=smollm2_gsm8k"])
    with pytest.raises(FileNotFoundError, match=f"data file not found: {tmp_path / 'nowhere'}/gsm8k/train.jsonl"):
        build_task(cfg.task)
    monkeypatch.delenv("RLX_DATA")
    monkeypatch.chdir(tmp_path)  # no ../shared beside this directory
    with pytest.raises(FileNotFoundError, match=rf"\.\./shared/data/gsm8k/train\.jsonl \(= {tmp_path.parent}/shared"):
        build_task(compose(["experiment=smollm2_gsm8k"]).task)


def test_a_run_without_the_file_stops_before_any_model_is_built(tmp_path, monkeypatch):
    from rlx.train import run

    monkeypatch.setenv("RLX_DATA", str(tmp_path / "nowhere"))
    monkeypatch.setenv("RLX_CACHE", str(tmp_path / "cache"))
    with pytest.raises(FileNotFoundError, match="nowhere/gsm8k/train.jsonl"):
        run(compose(["experiment=smollm2_gsm8k", "trainer.threads=1", "logger.mode=disabled"]), tmp_path / "run")
    assert not (tmp_path / "cache").exists()  # no SmolLM2 conversion, no engine
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


@needs_gsm8k
def test_the_gsm8k_experiment_carves_500_disjoint_questions(monkeypatch):
    monkeypatch.chdir(ROOT)  # the config's path is relative to the launch directory, the repo root
    monkeypatch.delenv("RLX_DATA", raising=False)
    cfg = compose(["experiment=smollm2_gsm8k", "task.n_eval=0"])
    assert cfg.model.chat_prompts and cfg.task.holdout == 500
    t = build_task(cfg.task)
    rows = [json.loads(line) for line in GSM8K.read_text().splitlines()]
    assert len(rows) == 7473 and len(t.eval) == 500 and len(t.train) == 7473 - 500
    held = [rows[int(e.key.split(":")[1])]["question"] for e in t.eval]
    assert held == ranked([r["question"] for r in rows], 1234)[:500]  # GSM8K's questions are all distinct
    assert not set(held) & {rows[int(e.key.split(":")[1])]["question"] for e in t.train}
    # the first held-out problem, row 4296 (jello bathtub): 6 ft^3 x 7.5 gal x 8 lb = 360 lb of water,
    # x 1.5 tbsp = 540 tbsp, x $0.50 = $270
    assert t.eval[0].key == "train.jsonl:4296" and t.eval[0].answer == "270"
    assert t.eval[0].prompt.endswith("write the final answer on the last line as '#### <number>'.")
    assert [e.key for e in build_task(compose(["experiment=smollm2_gsm8k", "task.n_eval=200"]).task).eval] == [e.key for e in t.eval][:200]
