"""The chunked LM head equals the full-vocabulary path: value, entropy and every gradient."""

import pytest
import torch
from torch import nn

from rlx.models.logprob_head import chunked_head, full_head


def _case(bias: bool, weight_grad: bool, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    head = nn.Linear(16, 97, bias=bias)
    with torch.no_grad():
        head.weight.copy_(torch.randn(97, 16, generator=g))
        if bias:
            head.bias.copy_(torch.randn(97, generator=g))
    head.weight.requires_grad_(weight_grad)
    hidden = torch.randn(23, 16, generator=g, requires_grad=True)  # [M, H]
    target = torch.randint(0, 97, (23,), generator=g)  # [M]
    coef = torch.randn(23, generator=g)  # an arbitrary dL/dlogp
    return head, hidden, target, coef


def _grads(fn, head, hidden, target, coef):
    logp, ent = fn(head, hidden, target)
    (logp * coef).sum().backward()
    out = {"logp": logp.detach(), "ent": ent.detach() if ent is not None else None, "h": hidden.grad.clone()}
    for name, q in head.named_parameters():
        if q.requires_grad:
            out[name] = q.grad.clone()
    return out


@pytest.mark.parametrize("bias,weight_grad,fp32,temp,chunk", [
    (False, False, False, 1.0, 5),  # LoRA: the head is frozen, only dL/dh flows
    (True, True, False, 0.7, 4),  # full fine-tuning with a biased head, temperature != 1
    (False, True, True, 1.3, 64),  # fp32_head option; one chunk holds every token
    (True, False, True, 1.0, 1),  # one token per chunk
])
def test_chunked_head_matches_full(bias, weight_grad, fp32, temp, chunk):
    head, hidden, target, coef = _case(bias, weight_grad)
    ref = _grads(lambda h, x, t: full_head(h, x, t, temp, fp32, True), head, hidden, target, coef)
    head2, hidden2, target2, coef2 = _case(bias, weight_grad)
    got = _grads(lambda h, x, t: chunked_head(h, x, t, temp, fp32, chunk, True), head2, hidden2, target2, coef2)
    for k in ref:
        torch.testing.assert_close(got[k], ref[k], rtol=1e-5, atol=1e-5, msg=k)


def test_logprob_and_entropy_by_hand():
    # V = 3, logits [0, ln 2, ln 5] -> p = [1/8, 2/8, 5/8]; target 1: log p = ln(1/4) = -1.3863
    # entropy = -(1/8 ln 1/8 + 1/4 ln 1/4 + 5/8 ln 5/8) = 0.2599 + 0.3466 + 0.2938 = 0.9003
    head = nn.Linear(1, 3, bias=False)
    with torch.no_grad():
        head.weight.copy_(torch.tensor([[0.0], [2.0], [5.0]]).log().nan_to_num(neginf=0.0))
    h = torch.ones(1, 1)
    logp, ent = chunked_head(head, h, torch.tensor([1]), 1.0, False, 8, True)
    assert logp.item() == pytest.approx(-1.386294, abs=1e-5)
    assert ent.item() == pytest.approx(0.900256, abs=1e-5)


def test_non_linear_head_runs_checkpointed_chunks():
    """A head that is not a plain nn.Linear (LoRA-wrapped, quantized) goes through checkpointed chunks."""
    head, hidden, target, coef = _case(False, True)
    wrapped = nn.Sequential(head)  # any module: not type nn.Linear
    ref = _grads(lambda h, x, t: full_head(h, x, t, 1.0, False, True), head, hidden, target, coef)
    head.weight.grad = None
    hidden.grad = None
    got = _grads(lambda h, x, t: chunked_head(wrapped, x, t, 1.0, False, 3, True), head, hidden, target, coef)
    for k in ref:
        torch.testing.assert_close(got[k], ref[k], rtol=1e-5, atol=1e-5, msg=k)


def test_bf16_autocast_is_close_to_full():
    """Under bf16 autocast both paths run the head matmul in bf16: equal to bf16 rounding."""
    head, hidden, target, coef = _case(False, False)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref = _grads(lambda h, x, t: full_head(h, x, t, 1.0, False, False), head, hidden, target, coef)
    head2, hidden2, target2, coef2 = _case(False, False)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = _grads(lambda h, x, t: chunked_head(h, x, t, 1.0, False, 7, False), head2, hidden2, target2, coef2)
    torch.testing.assert_close(got["logp"], ref["logp"], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(got["h"], ref["h"], rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("path", ["sampler", "full", "chunked_linear", "chunked_module"])
def test_fp32_head_stays_fp32_under_bf16_autocast(path):
    """ScaleRL's FP32 head: under bf16 autocast the head still runs in fp32, in the sampler's logits
    (rlx.models.forward.lm_logits) as in every training path, so sampler and trainer agree."""
    from types import SimpleNamespace

    from rlx.models.forward import lm_logits

    head, hidden, target, _ = _case(True, False)
    hidden = hidden.detach()
    other = type("LoraLikeHead", (nn.Linear,), {})(16, 97)  # not type nn.Linear: the checkpointed-chunk path
    other.load_state_dict(head.state_dict())

    def run():
        if path == "sampler":
            logits = lm_logits(SimpleNamespace(lm_head=head), hidden, True)
            return torch.log_softmax(logits, -1).gather(-1, target[:, None]).squeeze(-1)
        if path == "full":
            return full_head(head, hidden, target, 1.0, True, False)[0]
        return chunked_head(head if path == "chunked_linear" else other, hidden, target, 1.0, True, 5, False)[0]

    want = run()  # no autocast: fp32 throughout
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        got = run()
        bf16 = torch.log_softmax(head(hidden).float(), -1).gather(-1, target[:, None]).squeeze(-1)
    torch.testing.assert_close(got, want.detach(), rtol=1e-6, atol=1e-6)
    assert (bf16 - want.detach()).abs().max() > 1e-3  # what the head gives in bf16: far from fp32


def _largest_saved(fn) -> int:
    """numel of the largest tensor autograd keeps for the backward while `fn` runs."""
    sizes = []

    def pack(t):
        sizes.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return max(sizes)


@pytest.mark.parametrize("V", [1000, 8000])
def test_what_the_backward_keeps_grows_with_the_chunk_not_with_V(V):
    """The full path keeps [M, V] log-probs for its backward; the chunked one keeps hidden states and
    one log-sum-exp per token, whatever V (and the weight, which the model holds anyway)."""
    M, H = 300, 16
    head = nn.Linear(H, V, bias=False)
    hidden = torch.randn(M, H, requires_grad=True)
    target = torch.randint(0, V, (M,))
    full = _largest_saved(lambda: full_head(head, hidden, target, 1.0, False, False))
    chunked = _largest_saved(lambda: chunked_head(head, hidden, target, 1.0, False, 64, False))
    assert full >= M * V
    assert chunked == max(V * H, M * H)  # the head weight itself, or the hidden states; nothing [M, V]


@pytest.mark.parametrize("wrap", [False, True], ids=["linear", "module"])
def test_no_position_needs_a_logprob(wrap):
    head, hidden, target, _ = _case(False, True)
    module = nn.Sequential(head) if wrap else head
    logp, ent = chunked_head(module, hidden[:0], target[:0], 1.0, False, 4, True)
    assert logp.shape == (0,) and ent.shape == (0,)
