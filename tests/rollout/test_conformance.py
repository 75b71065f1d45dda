"""Conformance suite: every engine, on the same LoRA policy, against the trainer's own forward.

- behaviour log-probs = the trainer's log-probs of the engine's samples (mean/max |diff| bounded, fp32)
- greedy = the trainer's argmax (except at near-ties)
- eos / stop / padding masks; truncation flags; texts without eos
- same generator state -> same samples; another -> other samples
- top-k / top-p: the log-probs are of the distribution really sampled from
- sync: new LoRA weights reach the engine; every row carries the synced policy version
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from rlx.models.forward import causal_lm, lm_logits, position_ids, token_logprobs
from rlx.rollout import SamplingParams
from tests.rollout.conftest import engine_params

PROMPTS = ["3+4=", "12-5=", "7*8=", "hello", "a", "99+1=", "(2+3)*4=", "x"]
FP32_MEAN, FP32_MAX = 1e-4, 2e-3  # per-token |trainer - engine| bounds in fp32
BF16_MEAN = 0.05  # bf16 engine vs fp32 trainer (measured: docs/engine.md)


def trainer_logprobs(policy, batch, temperature=1.0):  # [N, T]
    with torch.no_grad():
        return token_logprobs(policy, batch.input_ids, batch.attention_mask, batch.completion_ids.shape[1], temperature)


def trainer_logits(policy, batch):  # [N, T, V] logits at the positions predicting each completion token
    lm = causal_lm(policy)
    with torch.no_grad():
        am = batch.attention_mask
        h = lm.model(input_ids=batch.input_ids, attention_mask=am, position_ids=position_ids(am)).last_hidden_state
        return lm_logits(lm, h[:, -batch.completion_ids.shape[1] - 1: -1], False)


def gen(engine, n=4, seed=0, **sp):
    params = SamplingParams(**{"max_tokens": 16, **sp})
    return engine.generate(PROMPTS, n, params, torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("name", engine_params())
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_behaviour_logprobs_match_trainer(served, name, temperature):
    engine, policy, _ = served[name]
    b = gen(engine, temperature=temperature)
    m = b.completion_mask.bool()
    d = (trainer_logprobs(policy, b, temperature) - b.logprobs).abs()[m]
    assert d.mean() < FP32_MEAN and d.max() < FP32_MAX, (name, d.mean().item(), d.max().item())
    assert (b.logprobs[m] < 0).all() and (b.logprobs[~m] == 0).all()


@pytest.mark.parametrize("name", engine_params())
def test_greedy_is_trainer_argmax(served, name):
    engine, policy, _ = served[name]
    b = gen(engine, n=1, temperature=0.0)
    logits = trainer_logits(policy, b)  # [N, T, V]
    top2 = logits.topk(2, -1).values
    clear = (top2[..., 0] - top2[..., 1] > 1e-3) & b.completion_mask.bool()
    assert clear.sum() > 0.9 * b.completion_mask.sum()  # the fixture makes near-ties rare
    assert torch.equal(logits.argmax(-1)[clear], b.completion_ids[clear])
    # greedy log-probs are the full softmax's
    full = torch.log_softmax(logits, -1).gather(-1, b.completion_ids.unsqueeze(-1)).squeeze(-1)
    assert (full - b.logprobs)[b.completion_mask.bool()].abs().max() < FP32_MAX


@pytest.mark.parametrize("name", engine_params())
def test_eos_stop_and_padding_masks(served, name):
    engine, _, tok = served[name]
    eos, pad = tok.eos_token_id, tok.pad_token_id
    b = gen(engine, n=8, max_tokens=12)
    ended = 0
    for row, m, trunc, text in zip(b.completion_ids, b.completion_mask, b.truncated, b.texts):
        L = int(m.sum())
        assert m[:L].all() and not m[L:].any()  # one contiguous run from the start
        assert (row[L:] == pad).all()
        hit = (row[:L] == eos).nonzero()
        if trunc:
            assert L == 12 and len(hit) == 0
        else:
            assert len(hit) == 1 and int(hit[0]) == L - 1  # mask runs through the eos, nothing after
            ended += 1
        assert "<eos>" not in text and text == tok.decode([t for t in row[:L].tolist() if t != eos], skip_special_tokens=True)
    assert 0 < ended < len(b)  # both cases occur in this fixture
    assert torch.equal(b.lengths, b.completion_mask.sum(1))
    # an extra stop token ends sequences too, and is not in the text
    stop = tok.convert_tokens_to_ids("1")
    s = gen(engine, n=8, max_tokens=12, stop_token_ids=(stop,))
    for row, m, trunc in zip(s.completion_ids, s.completion_mask, s.truncated):
        L = int(m.sum())
        assert ((row[: L - 1] == stop) | (row[: L - 1] == eos)).sum() == 0
        assert trunc or int(row[L - 1]) in (stop, eos)
    assert any(int(r[int(m.sum()) - 1]) == stop for r, m in zip(s.completion_ids, s.completion_mask))


def _stop_at(tok, ids: list[int], stops) -> int | None:
    """The fewest leading tokens whose text (special tokens kept) holds a stop string; None if none does."""
    return next((k for k in range(1, len(ids) + 1) if any(s in tok.decode(ids[:k]) for s in stops)), None)


def _stop_strings(tok, rows: list[list[int]]) -> tuple[str, str]:
    """A two- and a three-character string of the rows' texts (no special token's characters), each held
    by some rows and not by others: the most common such, so that the test has rows of both kinds."""
    texts = [tok.decode(r, skip_special_tokens=True) for r in rows]
    special = "".join(tok.all_special_tokens)
    picked = []
    for width in (2, 3):
        grams = Counter(g for t in texts for g in {t[i: i + width] for i in range(len(t) - width + 1)})
        picked.append(next(g for g, c in grams.most_common() if c < len(texts) and not set(g) & set("<>")
                           and g not in special and not any(p in g for p in picked)))
    return tuple(picked)


@pytest.mark.parametrize("name", engine_params())
def test_stop_strings_end_a_row_right_after_them(served, name):
    """SamplingParams.stop: a row ends at the token that completes a stop string (kept: its text ends with
    the string; not truncated). Each stop string spans tokens (the char tokenizer writes one character per
    token). The kept tokens and log-probs are those the same seed gives without stop strings (a prefix),
    and the rows that hold none are unchanged."""
    engine, _, tok = served[name]
    plain = gen(engine, n=4, seed=11, max_tokens=24)
    rows = [r[: int(m.sum())].tolist() for r, m in zip(plain.completion_ids, plain.completion_mask)]
    stops = _stop_strings(tok, rows)
    b = gen(engine, n=4, seed=11, max_tokens=24, stop=stops)
    cut = unchanged = 0
    for r, row in enumerate(rows):
        k, L = _stop_at(tok, row, stops), int(b.lengths[r])
        if k is None:  # holds no stop string: the row as without them
            assert L == len(row) and b.texts[r] == plain.texts[r] and bool(b.truncated[r]) == bool(plain.truncated[r])
            unchanged += 1
        else:
            assert L == k and not b.truncated[r] and b.texts[r].endswith(stops), (name, r, b.texts[r], stops)
            cut += k < len(row)
        assert b.completion_ids[r, :L].tolist() == row[:L]
        assert torch.equal(b.logprobs[r, :L], plain.logprobs[r, :L]), (name, r)
        assert not b.completion_mask[r, L:].any() and (b.logprobs[r, L:] == 0).all()
    assert cut >= 3 and unchanged >= 3, (cut, unchanged, stops)


@pytest.mark.parametrize("name", engine_params())
def test_same_generator_same_samples(served, name):
    engine, _, _ = served[name]
    a, b, c = gen(engine, seed=3), gen(engine, seed=3), gen(engine, seed=4)
    assert torch.equal(a.completion_ids, b.completion_ids) and torch.equal(a.logprobs, b.logprobs)
    assert not torch.equal(a.completion_ids, c.completion_ids)
    assert a.group.tolist() == [i // 4 for i in range(len(PROMPTS) * 4)]  # prompt-major rows


@pytest.mark.parametrize("name", engine_params())
def test_top_k_top_p_logprobs_are_of_the_sampled_distribution(served, name):
    engine, policy, _ = served[name]
    greedy = gen(engine, n=1, temperature=0.0)
    for sp in ({"top_k": 1}, {"top_p": 1e-6}):
        b = gen(engine, n=2, temperature=1.0, **sp)  # one token kept: the argmax, with probability 1
        m = b.completion_mask.bool()
        assert torch.equal(b.completion_ids[::2], greedy.completion_ids)
        assert b.logprobs[m].abs().max() < 1e-5  # log 1 = 0 in the renormalized distribution
    # top_k = 5: every sampled token is among the trainer's top 5, and its log-prob is renormalized
    b = gen(engine, n=4, temperature=1.0, top_k=5)
    logits = trainer_logits(policy, b)
    m = b.completion_mask.bool()
    top5 = logits.topk(5, -1)
    assert (top5.indices == b.completion_ids.unsqueeze(-1)).any(-1)[m].all()
    renorm = torch.log_softmax(top5.values, -1)  # [N, T, 5]
    want = renorm.gather(-1, (top5.indices == b.completion_ids.unsqueeze(-1)).float().argmax(-1, keepdim=True)).squeeze(-1)
    assert (want - b.logprobs)[m].abs().max() < FP32_MAX


@pytest.mark.parametrize("name", engine_params())
def test_sync_reaches_the_engine_and_versions_rows(served, name):
    engine, policy, _ = served[name]
    before = gen(engine, temperature=0.0, n=1)
    lora_b = [p for n, p in policy.named_parameters() if "lora_B" in n]
    saved = [p.detach().clone() for p in lora_b]
    try:
        with torch.no_grad():
            for p in lora_b:
                p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(5)) * 0.5)
        engine.sync(policy, 7)
        after = gen(engine)
        assert (after.version == 7).all() and after.version.shape == (len(after),)
        m = after.completion_mask.bool()
        d = (trainer_logprobs(policy, after) - after.logprobs).abs()[m]
        assert d.mean() < FP32_MEAN, d.mean()  # the engine samples from the new weights
        assert not torch.equal(gen(engine, temperature=0.0, n=1).completion_ids, before.completion_ids)
    finally:
        with torch.no_grad():
            for p, s in zip(lora_b, saved):
                p.copy_(s)
        engine.sync(policy, 0)
    assert torch.equal(gen(engine, temperature=0.0, n=1).completion_ids, before.completion_ids)


@pytest.mark.parametrize("name", engine_params(["hf", "vllm"]))
def test_inflight_update_continues_sequences_under_new_weights(served, name):
    """PipelineRL's in-flight update: weights loaded between two decode steps of one generation reach
    the sequences in progress; every token records the version that sampled it (hf: an engine with
    its own weights, as rollout.mode=async builds it; vllm: merged sync through its step loop)."""
    from types import SimpleNamespace

    from rlx.rollout.hf import HFEngine

    base, policy, tok = served[name]
    own = HFEngine(SimpleNamespace(batch_size=512), tok, policy, base.trainer, own_weights=True) if name == "hf" else None
    engine = own or base
    ref = gen(engine, n=2, seed=3)
    lora_b = [p for n, p in policy.named_parameters() if "lora_B" in n]
    saved = [p.detach().clone() for p in lora_b]
    with torch.no_grad():
        for p in lora_b:
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(5)) * 0.5)
    payload = engine.export_weights(policy)  # version 9, not loaded yet
    with torch.no_grad():
        for p, s in zip(lora_b, saved):
            p.copy_(s)
    calls = {"n": 0}

    def hook():
        calls["n"] += 1
        if calls["n"] == 3:
            engine.load_weights(payload, 9)

    engine.between_steps = hook
    try:
        b = gen(engine, n=2, seed=3)
    finally:
        engine.between_steps = None
        engine.sync(policy, 0)
    m = b.completion_mask.bool()
    assert (b.version == 0).all()
    assert set(b.token_version[m].tolist()) == {0, 9} and (b.token_version[~m] == -1).all()
    assert (b.token_version.masked_fill(~m, 10**6).diff(dim=1) >= 0).all()  # versions only grow along a row
    mixed = [(r[mk] == 0).any() and (r[mk] == 9).any() for r, mk in zip(b.token_version, m)]
    assert any(mixed)  # sequences in progress switched weights mid-way
    old = b.token_version == 0
    T = min(b.completion_ids.shape[1], ref.completion_ids.shape[1])
    assert torch.equal(b.completion_ids[:, :T][old[:, :T]], ref.completion_ids[:, :T][old[:, :T]])  # same before
    d = (trainer_logprobs(policy, b) - b.logprobs).abs()[old & m]
    assert d.max() < FP32_MAX  # tokens labelled 0 came from the old weights
    new = (b.token_version == 9) & m
    assert (trainer_logprobs(policy, b) - b.logprobs).abs()[new].mean() > 10 * FP32_MEAN  # the rest did not


@pytest.mark.parametrize("name", engine_params())
def test_forced_interruption_appends_the_phrase_and_scores_the_answer(served, name):
    """Rows that hit the thinking budget get the phrase (forced, out of the loss) and an answer continued
    from prompt + thinking + phrase: its log-probs are the trainer's on that whole context."""
    from rlx.rollout.interrupt import interrupt_and_answer, phrase_ids

    engine, policy, tok = served[name]
    sp = SamplingParams(max_tokens=3)
    b = engine.generate(PROMPTS, 2, sp, torch.Generator().manual_seed(0))
    assert b.truncated.any() and not b.truncated.all()
    phrase = phrase_ids(tok, " time is up.")
    out = interrupt_and_answer(engine, b, sp, torch.Generator().manual_seed(1), phrase, 4)
    assert torch.equal(out.interrupted, b.truncated)
    for r in range(len(b)):
        L = int(b.lengths[r])
        assert torch.equal(out.completion_ids[r, :L], b.completion_ids[r, :L])
        if b.truncated[r]:
            assert out.completion_ids[r, L: L + len(phrase)].tolist() == phrase
            assert out.forced[r].tolist() == [L <= t < L + len(phrase) for t in range(out.forced.shape[1])]
            assert 1 <= int(out.lengths[r]) - L - len(phrase) <= 4
            ans = out.completion_ids[r, L + len(phrase): int(out.lengths[r])]
            assert out.texts[r] == tok.decode([t for t in ans.tolist() if t != tok.eos_token_id], skip_special_tokens=True)
        else:
            assert not out.forced[r].any() and out.texts[r] == b.texts[r] and int(out.lengths[r]) == L
    lm = out.loss_mask.bool()
    assert not (lm & out.forced).any() and lm.sum() == out.completion_mask.sum() - out.forced.sum()
    d = (trainer_logprobs(policy, out) - out.logprobs).abs()[lm]
    assert d.mean() < FP32_MEAN and d.max() < FP32_MAX


def test_interruption_phrase_the_tokenizer_cannot_write_is_refused(served):
    from rlx.rollout.interrupt import phrase_ids

    _, _, tok = served["hf"]
    with pytest.raises(ValueError, match="cannot write"):
        phrase_ids(tok, "time is up \u2603")


@pytest.mark.parametrize("name", engine_params(["hf", "vllm"]))
def test_inflight_update_keeps_aqn_noise_on(served, name):
    """An in-flight weight load during a noisy generation (rollout.mode=async with AQN) leaves the
    engine's norms noisy (vLLM's reload rewrites them: the schedule puts the noise back), and clean after."""
    from types import SimpleNamespace

    from omegaconf import OmegaConf

    from rlx.noise import build_noise
    from rlx.noise.config import NoiseConfig
    from rlx.rollout.hf import HFEngine
    from rlx.rollout.schedule import AsyncSchedule

    base, policy, tok = served[name]
    engine = HFEngine(SimpleNamespace(batch_size=512), tok, policy, base.trainer, own_weights=True) \
        if name == "hf" else base
    noise = build_noise(OmegaConf.structured(NoiseConfig(type="aqn", schedule="constant", sigma_start=0.5)), 10, 0)
    sched = AsyncSchedule(engine, None, 2, SamplingParams(max_tokens=4), torch.Generator(), noise=noise, k=1,
                          prompts_per_step=1)
    norms = lambda: {n: q.detach().clone() for n, q in engine.noise_target().named_parameters() if "norm" in n}  # noqa: E731
    clean = norms()
    try:
        with noise.applied(engine.noise_target(), 3):
            noisy = norms()
            sched.pending = (engine.export_weights(policy), 4)
            sched._apply_pending()
            after = norms()
        assert engine.version == 4
        assert any(not torch.equal(noisy[k], clean[k]) for k in clean)
        for k in clean:
            assert torch.equal(after[k], noisy[k]), k  # still the same noise after the load
        for k, v in norms().items():
            assert torch.equal(v, clean[k]), k  # and clean once the generation is over
    finally:
        engine.between_steps = None
        engine.sync(policy, 0)


# The server runs the in-process engine's vLLM bf16 numerics (the `vllm` parameter bounds them) and gets its
# dtype from `--dtype` (tests/gpu_contract/test_server_gpu_flags.py): a second server (~60 s) is `slow`.
# Last in the module on purpose: building and closing a second vLLM engine in this process tears
# down vLLM's process-global parallel state, which the module's `served` engines still use.
@pytest.mark.parametrize("name", engine_params(slow=("vllm-server",)))
def test_bf16_engine_mismatch_is_bounded(served, name, tmp_path):
    """A bf16 engine (hf under bf16 autocast; vLLM with dtype=bfloat16) against the fp32 trainer:
    the mismatch the TIS correction exists for. Nonzero, and bounded."""
    from tests.rollout.conftest import make_engine

    _, policy, tok = served[name]
    path = served["path"]
    engine = make_engine(name, policy, tok, path, dtype="bf16")
    try:
        b = gen(engine)
    finally:
        engine.close()
    m = b.completion_mask.bool()
    d = (trainer_logprobs(policy, b) - b.logprobs).abs()[m]
    print(f"[bf16 {name}] logprob_diff mean {d.mean():.4g} max {d.max():.4g}")
    assert 1e-4 < d.mean() < BF16_MEAN, d.mean()
