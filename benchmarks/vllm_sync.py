"""How should LoRA reach a colocated vLLM engine? `python -m benchmarks.vllm_sync`

Times one RL step's sync + generation both ways, alternating, on one random Qwen2 + LoRA:
- merged: W + s B A merged on the trainer side, reloaded in place (`reload_weights`) — what
  rlx.rollout.vllm does;
- adapter: the adapter saved in PEFT format and passed as a LoRA request (vLLM's LoRA kernels).
Prints median sync seconds, generation seconds and tokens/s per mode, and the ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from types import SimpleNamespace


def build_policy(path: str, hidden: int, layers: int, heads: int, r: int):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from rlx.models import attach_lora
    from rlx.models.tokenizer import build_char_tokenizer

    tok = build_char_tokenizer()
    cfg = Qwen2Config(vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                      num_attention_heads=heads, num_key_value_heads=max(1, heads // 2), max_position_embeddings=256,
                      tie_word_embeddings=False, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    torch.manual_seed(0)
    Qwen2ForCausalLM(cfg).save_pretrained(path)
    model = Qwen2ForCausalLM.from_pretrained(path)
    lora = SimpleNamespace(r=r, alpha=2 * r, dropout=0.0,
                           target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    return attach_lora(model.eval(), lora), tok


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--lora-r", type=int, default=8)
    ap.add_argument("--sequences", type=int, default=128)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    return ap


def main(argv=None) -> dict:
    ap = _parser()
    a = ap.parse_args(argv)
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    import torch

    torch.set_num_threads(a.threads)  # before vLLM starts (it disables set_num_threads afterwards)
    from vllm import LLM, SamplingParams
    from vllm.lora.request import LoRARequest

    from rlx.rollout.vllm_setup import lora_slot
    from rlx.rollout.vllm_weights import merged_state_dict

    path = tempfile.mkdtemp(prefix="rlx-vllm-sync-")
    policy, tok = build_policy(path, a.hidden, a.layers, a.heads, a.lora_r)
    prompt = {"prompt_token_ids": tok("12+34=", add_special_tokens=False).input_ids}
    sp = SamplingParams(temperature=1.0, max_tokens=a.max_tokens, detokenize=False, ignore_eos=True, logprobs=0)
    common = dict(model=path, skip_tokenizer_init=True, dtype="float32", max_model_len=128, seed=0, enforce_eager=True,
                  logprobs_mode="processed_logprobs")
    if not torch.cuda.is_available():
        common["kv_cache_memory_bytes"] = 256 << 20
    results = {}
    for mode in ("merged", "adapter"):
        extra = dict(enable_lora=True, max_lora_rank=lora_slot(a.lora_r), max_loras=1) if mode == "adapter" else {}
        llm = LLM(**common, **extra)
        rows = []
        for step in range(a.steps + 1):
            with torch.no_grad():
                for n, p in policy.named_parameters():
                    if "lora_B" in n:
                        p.add_(0.01)  # a new policy version
            t0 = time.perf_counter()
            if mode == "merged":
                llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(merged_state_dict(policy, torch.float32).items())})
                llm.reset_prefix_cache()
                req = None
            else:
                d = tempfile.mkdtemp(prefix="rlx-adapter-")
                policy.save_pretrained(d)
                req = LoRARequest(f"v{step}", step + 1, d)
            t1 = time.perf_counter()
            outs = llm.generate([prompt] * a.sequences, sp, use_tqdm=False, lora_request=req)
            t2 = time.perf_counter()
            if step > 0:  # step 0 warms up
                n_tok = sum(len(o.outputs[0].token_ids) for o in outs)
                rows.append((t1 - t0, t2 - t1, n_tok / (t2 - t1)))
        del llm
        results[mode] = {k: statistics.median(r[i] for r in rows) for i, k in enumerate(("sync_s", "gen_s", "tokens_per_s"))}
    print("| sync mode | sync s/step | generate s/step | tokens/s |\n|---|---|---|---|")
    for mode, r in results.items():
        print(f"| {mode} | {r['sync_s']:.4f} | {r['gen_s']:.3f} | {r['tokens_per_s']:.0f} |")
    print(f"merged / adapter tokens/s: {results['merged']['tokens_per_s'] / results['adapter']['tokens_per_s']:.2f}x")
    return results


if __name__ == "__main__":
    main()
