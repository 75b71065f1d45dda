"""The SFT stage of any model (model.sft.data; rlx.models.sft): completion-only loss on chat-rendered pairs,
a held-out SFT loss on rows never trained on, a cache keyed by data + model + config, the task's
held-out questions refused as SFT data, config refused before any model is built, and RL starting
from the SFT result. On the tiny model and on a tiny Llama HF directory (tied embeddings, as SmolLM2)
with a chat template, both built here."""

from __future__ import annotations

import json
import math
import random

import pytest
import torch

from tests.conftest import TINY, compose

# a chat template the char tokenizer can spell: "u:3+4=\na:" then the answer and "\n"
TEMPLATE = ("{% for m in messages %}{{ m['role'][0] }}:{{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}a:{% endif %}")
def _quiet(*_):
    pass


def write_rows(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def arith_rows(n: int, seed: int = 0, offset: int = 0) -> list[dict]:
    """n distinct `a+b=` question/answer rows: learnable by a tiny model in a few dozen steps."""
    rng, rows, seen = random.Random(seed), [], set()
    while len(rows) < n:
        a, b = rng.randint(0, 9), rng.randint(0, 9 + offset)
        q = f"{a}+{b}="
        if q not in seen:
            seen.add(q)
            rows.append({"question": q, "answer": str(a + b)})
    return rows


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    """A 2-layer Llama (tied embeddings) with the char tokenizer and TEMPLATE as its chat template."""
    return _save_llama(tmp_path_factory.mktemp("llama"), seed=0)


def _save_llama(path, seed: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    from rlx.models.tokenizer import build_char_tokenizer

    tok = build_char_tokenizer()
    tok.chat_template = TEMPLATE
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=128,
                      tie_word_embeddings=True, pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
                      eos_token_id=tok.eos_token_id, initializer_range=0.2)  # wide enough a head for frozen-base LoRA
    torch.manual_seed(seed)
    LlamaForCausalLM(cfg).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def hf_cfg(hf_dir, cache, data, extra=()):
    """model=hf on the tiny Llama, chat prompts, the SFT stage on `data`; RL on arith `a+b=` (100 problems:
    60 train, 16 held out), the space arith_rows draws from."""
    return compose(TINY + ["task.num_terms=2", "task.n_train=60", "task.n_eval=16", "model=hf", f"model.path={hf_dir}", "model.dtype=float32", "model.chat_prompts=true",
                           f"model.cache_dir={cache}", f"model.sft.data={data}", "model.sft.steps=4",
                           "model.sft.lr=3e-3", "model.sft.warmup_steps=1", "model.sft.batch_tokens=256",
                           "model.sft.max_len=32", "model.sft.eval_frac=0.25", *extra])


def tiny_cfg(cache, extra=()):
    """The tiny model (random init) through the SFT stage on the task's own split (arith)."""
    return compose(TINY + [f"model.cache_dir={cache}", "model.sft.data=task", "model.sft.n=150",
                           "model.sft.steps=40", "model.sft.batch_tokens=1024", "model.sft.max_len=64",
                           "model.sft.eval_frac=0.1", *extra])


def prepared(cfg):
    """(task with rendered prompts, tokenizer), as rlx.models.load_base prepares them."""
    from rlx.models import load_tokenizer
    from rlx.tasks import build_task

    task = build_task(cfg.task)
    tok = load_tokenizer(cfg.model)
    task.render_chat(tok, all_prompts=cfg.model.chat_prompts)
    return task, tok


def warm(cfg, log=_quiet):
    """rlx.models.sft.warm_start as build_policy calls it: the result directory."""
    from rlx import models
    from rlx.models import sft

    task, tok = prepared(cfg)
    return sft.warm_start(cfg, task, tok, lambda: models._sft_start(cfg, log), models._start_dir(cfg), log)


class TrainCount:
    """Counts rlx.models.sft.loop.train calls (a cache hit trains nothing)."""

    def __init__(self, monkeypatch):
        import rlx.models.sft.loop as loop

        self.n, real = 0, loop.train

        def counted(*a, **k):
            self.n += 1
            return real(*a, **k)

        monkeypatch.setattr(loop, "train", counted)


# ---- the completion-only loss ---------------------------------------------------------------------

def test_chat_pairs_carry_loss_on_completion_tokens_only(hf_dir, tmp_path):
    """Chat-rendered q/a rows: the prompt with its template tokens ("u:", "\\na:") carries no loss, the
    completion (answer, the template's newline, eos) does; the summed loss equals an independent
    log-softmax over the full logits at the completion positions."""
    from transformers import AutoModelForCausalLM

    from rlx.models.sft import select
    from rlx.models.sft.batches import collate, encode
    from rlx.models.sft.loop import batch_nll

    # operands outside the task's 0-9: never one of its held-out questions
    data = write_rows(tmp_path / "d.jsonl", [{"question": "13+4=", "answer": "17"}, {"question": "12+30=", "answer": "42"}])
    cfg = hf_cfg(hf_dir, tmp_path / "cache", data)
    task, tok = prepared(cfg)
    pairs = select(cfg, task, tok, _quiet)
    assert [(p.prompt, p.completion) for p in pairs] == [("u:13+4=\na:", "17\n"), ("u:12+30=\na:", "42\n")]
    rows = [encode(tok, p.prompt, p.completion) for p in pairs]
    assert [len(r.prompt) for r in rows] == [10, 11]  # every prompt character, the template's included
    assert [r.completion for r in rows] == [tok("17\n").input_ids + [tok.eos_token_id],
                                            tok("42\n").input_ids + [tok.eos_token_id]]
    batch = collate(rows, tok.pad_token_id)
    T = batch.n_completion
    assert batch.loss_mask.sum() == 4 + 4  # completion tokens only: the 21 prompt tokens and the pad carry none
    assert (batch.mask.sum() - batch.loss_mask.sum()).item() == 10 + 11
    for b, r in enumerate(rows):  # the masked-in positions hold exactly the completion
        assert batch.ids[b, -T:][batch.loss_mask[b].bool()].tolist() == r.completion
    model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32)
    nll, n = batch_nll(model, batch)
    pos = (batch.mask.cumsum(-1) - 1).clamp(min=0)
    logp = torch.log_softmax(model(input_ids=batch.ids, attention_mask=batch.mask, position_ids=pos).logits.float(), -1)
    want = 0.0
    for b, r in enumerate(rows):
        L = batch.ids.shape[1]
        for j, t in enumerate(r.completion):  # token j of the completion sits at L - len + j, predicted one earlier
            want -= logp[b, L - len(r.completion) + j - 1, t].item()
    assert n == 8 and nll.item() == pytest.approx(want, rel=1e-5)


def test_chat_rows_take_the_last_assistant_turn_as_completion(hf_dir, tmp_path):
    from rlx.models.sft import select

    msgs = [{"role": "user", "content": "11+1="}, {"role": "assistant", "content": "12"}]
    data = write_rows(tmp_path / "chat.jsonl", [{"messages": msgs}])
    cfg = hf_cfg(hf_dir, tmp_path / "cache", data, ["model.sft.eval_frac=0"])
    task, tok = prepared(cfg)
    (p,) = select(cfg, task, tok, _quiet)
    assert (p.prompt, p.completion) == ("u:11+1=\na:", "12\n")
    bad = write_rows(tmp_path / "bad.jsonl", [{"messages": msgs[:1]}])
    with pytest.raises(ValueError, match="model.sft.messages_field.*ending with the assistant"):
        select(hf_cfg(hf_dir, tmp_path / "cache", bad), task, tok, _quiet)


def test_token_budget_batches():
    """Every batch fits the budget (rows x longest row), every row comes once per pass; epochs > 0
    trains ceil(epochs x batches per pass) steps."""
    from rlx.models.sft.batches import Encoded, plan
    from rlx.models.sft.loop import batches

    rng = random.Random(0)
    lengths = [rng.randint(3, 40) for _ in range(200)]
    out = plan(lengths, 128, random.Random(1))
    assert sorted(i for b in out for i in b) == list(range(200))
    assert all(len(b) * max(lengths[i] for i in b) <= 128 for b in out)
    rows = [Encoded([1] * (n - 1), [2]) for n in lengths]
    per_pass = len(plan(lengths, 128, random.Random("sft-0-0")))
    assert len(batches(rows, 128, 0, steps=7, epochs=0)) == 7
    assert len(batches(rows, 128, 0, steps=7, epochs=2.5)) == math.ceil(2.5 * per_pass)


# ---- the held-out SFT loss ------------------------------------------------------------------------

def test_heldout_loss_is_computed_on_heldout_rows_only(monkeypatch):
    """Training batches (with grad) hold training rows only; every held-out evaluation (no grad) holds
    exactly the held-out rows; the logged loss before is the held-out rows' mean NLL per token."""
    from transformers import Qwen2ForCausalLM

    import rlx.models.sft.loop as loop
    from rlx.models.tiny import tiny_config
    from rlx.models.tokenizer import build_char_tokenizer
    from rlx.models.sft.batches import encode

    tok = build_char_tokenizer()
    cfg = compose(TINY)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(tiny_config(cfg.model, len(tok), tok))
    rows = [encode(tok, r["question"], r["answer"]) for r in arith_rows(40)]
    train_rows, eval_rows = rows[:30], rows[30:]
    key = {tuple(r.prompt): "train" for r in train_rows} | {tuple(r.prompt): "eval" for r in eval_rows}
    want_before = loop.heldout_loss(model, eval_rows, 256, tok.pad_token_id)
    seen = {"train": [], "eval": []}
    real = loop.batch_nll

    def spy(m, batch):
        for b in range(batch.ids.shape[0]):
            ids = batch.ids[b][batch.mask[b].bool()].tolist()
            prompt = next(p for p in key if ids[: len(p)] == list(p))
            seen["train" if torch.is_grad_enabled() else "eval"].append(key[prompt])
        return real(m, batch)

    monkeypatch.setattr(loop, "batch_nll", spy)
    sft = compose(TINY + ["model.sft.data=task", "model.sft.n=10", "model.sft.steps=6", "model.sft.eval_every=2",
                          "model.sft.batch_tokens=128", "model.sft.max_len=16"]).model.sft
    summary, metric_rows = loop.train(model, train_rows, eval_rows, sft, tok.pad_token_id, _quiet)
    assert set(seen["train"]) == {"train"} and set(seen["eval"]) == {"eval"}
    assert len(seen["eval"]) == len(eval_rows) * 4  # before, steps 2 and 4, after: each the whole held-out set
    assert summary["sft/eval_loss_before"] == pytest.approx(want_before)
    assert [r["step"] for r in metric_rows if "sft/eval_loss" in r] == [0, 2, 4, 6]
    assert summary["sft/eval_rows"] == 10 and summary["sft/train_rows"] == 30


def test_eval_split_is_by_question_and_seeded():
    from rlx.models.sft.data import Pair, split_eval

    pairs = [Pair(f"q{i % 20}", "a", frozenset()) for i in range(40)]  # each question twice
    train, held = split_eval(pairs, 0.1, seed=0)
    assert len({p.prompt for p in held}) == 2 and len(held) == 4
    assert not {p.prompt for p in train} & {p.prompt for p in held}
    assert split_eval(pairs, 0.1, seed=0) == (train, held) and split_eval(pairs, 0.1, seed=1)[1] != held


# ---- SFT learns, and RL starts from it --------------------------------------------------------------

def test_sft_lowers_the_heldout_loss_tiny_full(tmp_path):
    from rlx.models import sft

    out = warm(tiny_cfg(tmp_path))
    s = sft.read_record(out)
    assert s["sft/eval_rows"] == 15 and s["sft/train_rows"] == 135
    assert s["sft/eval_loss_after"] < 0.7 * s["sft/eval_loss_before"]


def test_sft_lowers_the_heldout_loss_hf_lora_and_rl_starts_from_it(hf_dir, tmp_path):
    """LoRA SFT on the Llama (merged after), then build_policy: the base holds the SFT weights, RL's LoRA
    sits on top, base_dir is the SFT directory and the label is 'SFT'; RL's split skips the SFT rows."""
    from safetensors.torch import load_file

    from rlx.models import sft
    from rlx.models import base_dir, base_label, build_policy, has_lora, sft_record

    data = write_rows(tmp_path / "d.jsonl", arith_rows(80))
    cfg = hf_cfg(hf_dir, tmp_path / "cache", data, ["model.sft.finetune=lora", "model.sft.lora.r=8",
                                                    "model.sft.lora.alpha=16", "model.sft.steps=40",
                                                    "model.sft.lr=1e-2", "model.sft.warmup_steps=4"])
    task, _ = prepared(cfg)
    n_train = len(task.train)
    policy, tok = build_policy(cfg, task, _quiet)
    out = base_dir(cfg)
    s = sft.read_record(out)
    assert s == sft_record(cfg) and s["sft/eval_loss_after"] < 0.5 * s["sft/eval_loss_before"]
    assert out.name.startswith("sft-") and base_label(cfg) == "SFT" and has_lora(policy)
    saved, original = load_file(out / "model.safetensors"), load_file(hf_dir / "model.safetensors")
    name = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(saved[name], original[name])  # the SFT adapter was merged into the weights
    base = dict(policy.get_base_model().named_parameters())
    assert torch.equal(base[name.replace(".weight", ".base_layer.weight")].detach(), saved[name])
    asked = {r["question"] for r in arith_rows(80)}
    assert len(task.train) < n_train and not asked & {e.prompt.split("\n")[0][2:] for e in task.train}


def test_base_labels():
    from rlx.models import base_label

    assert base_label(compose([])) == "SFT"
    assert base_label(compose(["model.sft.steps=0"])) == "pretrained"  # as rlx.train has called a random init
    assert base_label(compose(["model.sft.steps=0", "model.sft.data=task", "model.sft.n=5", "model.sft.epochs=1"])) == "SFT"
    assert base_label(compose(["model=smollm2"])) == "pretrained"
    assert base_label(compose(["model=hf", "model.path=/x"])) == "pretrained"
    assert base_label(compose(["model=hf", "model.path=/x", "model.sft.data=task", "model.sft.n=5"])) == "SFT"


@pytest.mark.integration
def test_a_run_starts_from_the_sft_base(tmp_path):
    """rlx.train end to end on the tiny model with the stage: the base is the SFT directory."""
    from tests.conftest import run_tiny

    s = run_tiny(tmp_path / "run", [f"model.cache_dir={tmp_path / 'cache'}", "model.sft.data=task", "model.sft.n=100",
                                    "model.sft.steps=5", "model.sft.batch_tokens=512", "model.sft.max_len=64",
                                    "train.steps=2"])
    assert s["status"] == "finished" and len(list((tmp_path / "cache").glob("sft-*"))) == 1


# ---- the cache --------------------------------------------------------------------------------------

def test_the_cache_is_reused_and_keyed_by_data_model_and_config(hf_dir, tmp_path, monkeypatch):
    from rlx.models import base_dir

    count = TrainCount(monkeypatch)
    data = write_rows(tmp_path / "d.jsonl", arith_rows(24))
    cache = tmp_path / "cache"
    cfg = hf_cfg(hf_dir, cache, data)
    first = warm(cfg)
    assert count.n == 1 and first == base_dir(cfg)
    assert warm(cfg) == first and count.n == 1  # a second call trains nothing
    # RL-side keys, the eval cadence and the tiny warm start's keys are no part of the SFT result
    for same in (["model.sft.exclude_from_rl=false"], ["model.sft.eval_every=2"], ["model.lora.r=2"],
                 ["model.finetune=full"], ["algo.lr=0.5"], ["task.rewards={correct: 2.0}"], ["model.sft.batch_size=3"]):
        assert base_dir(hf_cfg(hf_dir, cache, data, same)) == first, same
    # config: retrains
    assert warm(hf_cfg(hf_dir, cache, data, ["model.sft.lr=1e-3"])) != first and count.n == 2
    # data: the same path with one row changed retrains
    write_rows(tmp_path / "d.jsonl", arith_rows(24) + [{"question": "19+9=", "answer": "28"}])
    assert warm(cfg) != first and count.n == 3
    # model: other weights under another path retrain
    other = _save_llama(tmp_path / "other", seed=1)
    assert warm(hf_cfg(other, cache, data)) not in (first, base_dir(cfg)) and count.n == 4


def test_the_tiny_warm_start_keeps_its_cache_keys():
    """model.sft.data null: the tiny base's key is what it was before the SFT stage existed (pinned here
    from the commit before it), whatever the stage's own keys say: the default experiment's README
    numbers come from these bases."""
    from rlx.models.tiny import cache_key

    stage_keys = ["model.sft.n=7", "model.sft.batch_tokens=99", "model.sft.finetune=lora", "model.sft.lora.r=2",
                  "model.sft.eval_frac=0.5", "model.sft.exclude_from_rl=false"]
    for over, key in (([], "85e0ebea15c8335f"), (TINY, "67f0aa80b26ba8c9"), (stage_keys, "85e0ebea15c8335f"),
                      (["model.sft.demo_prefix_frac=0"], "118e79c9b152bf87"), (["task=wordproblems"], "3eafa6bf2d4d3766")):
        cfg = compose(over)
        assert cache_key(cfg.model, cfg.task) == key, over


def test_the_tiny_base_is_keyed_by_its_chat_template_text_and_an_environments_own_data(tmp_path):
    """A template named by path keys as the text it holds (an edited file is a new base, the same text inline
    or by path one base); env=verifiers trains the warm start on the environment's rows, so its id and args
    key the base where the task group does not (env=trl and rlx's own environments use the task group's)."""
    from rlx.models import base_dir

    text = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    (tmp_path / "t.jinja").write_text(text)
    inline, by_path = compose(TINY), compose(TINY + [f"model.chat_template={tmp_path / 't.jinja'}"])
    inline.model.chat_template = text
    assert base_dir(inline) == base_dir(by_path)
    (tmp_path / "t.jinja").write_text(text + "!")
    assert base_dir(by_path) != base_dir(inline)
    vf = ["env=verifiers", "env.id=some_env"]
    keys = {base_dir(compose(TINY + over)) for over in ([], ["env=calculator"], vf, vf + ["env.args={n: 3}"],
                                                       ["env=verifiers", "env.id=other_env"])}
    assert len(keys) == 4  # env=calculator shares the task group's base


# ---- the held-out slice is never SFT data -----------------------------------------------------------

def _file_task(tmp_path, extra=()):
    """A file task carving 6 of 30 questions out as its held-out slice (task.holdout), tiny model."""
    rows = arith_rows(30)
    train = write_rows(tmp_path / "train.jsonl", rows)
    cfg = compose(TINY + ["task=gsm8k", f"task.train_path={train}", "task.eval_path=null", "task.holdout=6",
                          "task.n_eval=3", "task.prompt_template='{question}'", "task.answer_regex=null",
                          f"model.cache_dir={tmp_path / 'cache'}", *extra])
    cfg.model.chat_template = TEMPLATE  # for chat rows (the task's prompts stay plain strings)
    return cfg, rows


def test_sft_drops_the_tasks_heldout_questions_and_rl_skips_the_sft_rows(tmp_path):
    from rlx.models.sft import select
    from rlx.tasks.files import carve_holdout

    cfg, rows = _file_task(tmp_path)
    cfg.model.sft.data, cfg.model.sft.n = cfg.task.train_path, 10
    task, tok = prepared(cfg)
    held = {e.prompt for e in carve_holdout(cfg.task.train_path, cfg.task, 6, cfg.task.seed)[1]}
    assert len(held) == 6 and len(task.eval) == 3  # the whole slice is excluded, not only the n_eval evaluated
    pairs = select(cfg, task, tok, _quiet)
    want = [r["question"] for r in rows if r["question"] not in held]
    assert [p.prompt for p in pairs] == want[:10]  # the first n non-held-out rows, in file order
    assert [e.prompt for e in task.train] == want[10:]  # RL trains on the others


def test_evaluating_more_of_the_heldout_slice_is_the_same_sft(tmp_path):
    """task.n_eval picks which held-out rows are evaluated, but the SFT drops the whole slice: the same SFT
    rows, so the same cache entry (an RL run evaluating 500 and an lm-eval cross-check of 200 share it).
    The slice itself (task.holdout) changes the rows, so it stays in the key."""
    from rlx.models import base_dir
    from rlx.models.sft import select

    cfg3, _ = _file_task(tmp_path, ["model.sft.n=10"])
    cfg3.model.sft.data = cfg3.task.train_path
    cfg6, _ = _file_task(tmp_path, ["model.sft.n=10", "task.n_eval=6"])
    cfg6.model.sft.data = cfg6.task.train_path
    pairs = [[p.prompt for p in select(c, prepared(c)[0], prepared(c)[1], _quiet)] for c in (cfg3, cfg6)]
    assert pairs[0] == pairs[1] and base_dir(cfg3) == base_dir(cfg6)
    cfg8, _ = _file_task(tmp_path, ["model.sft.n=10", "task.holdout=8"])
    cfg8.model.sft.data = cfg8.task.train_path
    assert base_dir(cfg8) != base_dir(cfg3)


def test_the_heldout_slice_is_refused_as_sft_data(tmp_path):
    from rlx.models.sft import select
    from rlx.models.sft.data import Pair, check_disjoint, held_out_ids

    cfg, rows = _file_task(tmp_path)
    task, tok = prepared(cfg)
    held = [e.prompt for e in task.eval]
    for name, held_rows in (
            ("same.jsonl", [{"question": q, "answer": "0"} for q in held]),
            ("spaced.jsonl", [{"question": f"  {q}\n", "answer": "0"} for q in held]),  # other whitespace
            ("chat.jsonl", [{"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": "0"}]}
                            for q in held])):
        cfg.model.sft.data = write_rows(tmp_path / name, held_rows)
        task, tok = prepared(cfg)
        with pytest.raises(ValueError, match="held-out question of the task.*SFT would train on the evaluation"):
            select(cfg, task, tok, _quiet)
    # mixed in with the training rows (the task's own file): dropped, and the rest is checked disjoint
    cfg.model.sft.data = cfg.task.train_path
    cfg.model.sft.exclude_from_rl = False
    task, tok = prepared(cfg)
    logged = []
    pairs = select(cfg, task, tok, logged.append)
    assert len(pairs) == 24 and any("dropped 6 of 30" in line for line in logged)
    ids = held_out_ids(cfg, task)
    with pytest.raises(RuntimeError, match="held-out question"):
        check_disjoint(pairs + [Pair("u:x", "y", frozenset({held[0]}))], ids)


# ---- config refused before any model is built ----------------------------------------------------------

@pytest.mark.parametrize("over, err, match", [
    (["model.sft.lr=0"], ValueError, r"model.sft.lr must be in \(0, 1\]; got 0"),
    (["model.sft.eval_frac=1.0"], ValueError, r"model.sft.eval_frac must be in \[0, 1\); got 1.0"),
    (["model.sft.max_len=512", "model.sft.batch_tokens=256"], ValueError, "model.sft.batch_tokens must be >= model.sft.max_len=512"),
    (["model.sft.finetune=qlora"], ValueError, r"model.sft.finetune is not one of \['lora', 'full'\]; got 'qlora'"),
    (["model.sft.steps=0"], ValueError, "model.sft.steps must be > 0 when model.sft.epochs=0"),
    (["model.sft.lora.r=0"], ValueError, "model.sft.lora.r must be >= 1"),
    (["model.sft.prompt_template=Q:"], ValueError, "model.sft.prompt_template must contain {question}"),
    (["model.sft.n=0"], ValueError, "model.sft.data=task with model.sft.n=0 and model.sft.exclude_from_rl=true"),
    (["model.sft.data=/no/such.jsonl"], FileNotFoundError, "model.sft.data: no file or directory at '/no/such.jsonl'"),
    (["model.sft.n=-1"], ValueError, "model.sft.n must be >= 0"),
])
def test_bad_sft_config_is_refused_before_any_model_is_built(over, err, match, monkeypatch):
    import transformers

    from rlx.config.preflight import check

    def no_model(*_a, **_k):
        raise AssertionError("a model was built")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", no_model)
    monkeypatch.setattr(transformers.Qwen2ForCausalLM, "__init__", no_model)
    cfg = compose(TINY + ["model.sft.data=task", "model.sft.n=10"] + over)
    with pytest.raises(err, match=match):
        check(cfg)


def test_a_wrong_type_is_refused_at_composition():
    from hydra.errors import ConfigCompositionException

    with pytest.raises(ConfigCompositionException, match="batch_tokens"):
        compose(["model.sft.batch_tokens=lots"])
