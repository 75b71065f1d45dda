"""One hf-engine generate call on a real model, timed: `python -m benchmarks.hf_generate N T [overrides...]`.

N prompts of `experiment=smollm2_wordproblems` (1 thread; overrides such as quant=nvfp4 or trainer.dtype=fp32
follow), T greedy tokens each, after a 2-row warm-up. Prints process CPU and wall seconds and short hashes
of the texts, log-probs and entropies, so two trees run alternately can be compared for speed and for
identical samples (docs/lean.md, "Generation")."""
import hashlib
import json
import sys
import time

from rlx.eval.cli import build, prepare
from rlx.rollout.base import SamplingParams

def main(argv: list[str] | None = None) -> dict:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 2:
        raise SystemExit("usage: python -m benchmarks.hf_generate N T [key=value ...]")
    n, t = int(argv[0]), int(argv[1])
    _, src, cfg, _, trainer = prepare(["experiment=smollm2_wordproblems", "rollout=hf", "trainer.threads=1", *argv[2:]])
    task, _, engine = build(cfg, src, trainer)
    prompts = [e.prompt for e in task.train[:n]]
    sp = SamplingParams.from_config(cfg.rollout).but(max_tokens=t, temperature=0.0)
    engine.generate(prompts[:2], 1, sp, None, seeds=[0, 1])  # warm-up
    t0, w0 = time.process_time(), time.time()
    b = engine.generate(prompts, 1, sp, None, seeds=list(range(n)))
    digest = lambda data: hashlib.sha1(data).hexdigest()[:12]  # noqa: E731
    out = {"tokens": int(b.completion_mask.sum()), "cpu_s": time.process_time() - t0, "wall_s": time.time() - w0,
           "texts": digest("\x00".join(b.texts).encode()), "logp": digest(b.logprobs.numpy().tobytes()),
           "ent": digest(b.entropy.numpy().tobytes())}
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
