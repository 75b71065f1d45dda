"""`python -m benchmarks.studies.scaling_table1 [--seeds 100]`: how well the sigmoid fit extrapolates on ScaleRL's Table 1 curves.

For each Table 1 recipe: evaluations every 1k GPU-hours up to 100k, reward = the published curve
(R0 = 0.2) + N(0, noise^2); fit on the first half (points before 1.5k GPU-hours excluded, as in the
paper); report |A error|, |predicted - true reward at 100k| and how often the bootstrap intervals
cover the true A, B, C_mid. The numbers in docs/scaling.md come from this command.
"""

from __future__ import annotations

import argparse

import numpy as np

from rlx.scaling.curves import sigmoid
from rlx.report.sweeps import papers
from rlx.scaling.fitting import fit_sigmoid

def study(A, B, C_mid, seeds: int, noise: float, r0: float = 0.2, bootstrap: int = 100) -> dict[str, float]:
    compute = np.linspace(0.0, 100_000.0, 101)  # [101]
    half = compute <= 50_000.0
    truth_full = float(sigmoid(compute[-1], A, B, C_mid, r0))
    a_err, pred_err, covered = [], [], []
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        reward = sigmoid(compute, A, B, C_mid, r0) + rng.normal(0.0, noise, compute.size)
        reward[0] = r0
        fit = fit_sigmoid(compute[half], reward[half], exclude_before=1_500.0, bootstrap=bootstrap, seed=seed)
        a_err.append(abs(fit.A - A))
        pred_err.append(abs(float(fit.predict(compute[-1])) - truth_full))
        if bootstrap:
            covered.append([fit.intervals[k][0] - 1e-9 <= t <= fit.intervals[k][1] + 1e-9
                            for k, t in (("A", A), ("B", B), ("C_mid", C_mid))])
    a_err, pred_err = np.array(a_err), np.array(pred_err)
    cov = np.mean(covered, axis=0) if covered else [np.nan] * 3
    return {
        "dA_mean": a_err.mean(), "dA_max": a_err.max(), "dA_over": int((a_err > 0.02 + 1e-9).sum()),
        "dR_mean": pred_err.mean(), "dR_max": pred_err.max(), "dR_over": int((pred_err > 0.02).sum()),
        "cover_A": cov[0], "cover_B": cov[1], "cover_C_mid": cov[2],
    }

def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.studies.scaling_table1", description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--noise", type=float, default=0.01)
    parser.add_argument("--bootstrap", type=int, default=100)
    args = parser.parse_args(argv)
    print(f"{args.seeds} noise seeds, noise std {args.noise}, fit on <= 50k of 100k GPU-hours, "
          f"{args.bootstrap} bootstrap resamples (95% intervals)\n")
    print("dA = abs(fitted A - true A); dR = abs(predicted - true reward at 100k); n>0.02 = seeds beyond 0.02;")
    print("cover = share of seeds whose bootstrap interval contains the true value\n")
    cols = ("dA_mean", "dA_max", "dA_over", "dR_mean", "dR_max", "dR_over", "cover_A", "cover_B", "cover_C_mid")
    print("| recipe | mean dA | max dA | n dA>0.02 | mean dR | max dR | n dR>0.02 | cover A | cover B | cover C_mid |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, fit in papers()["scalerl"]["table1"].items():  # ScaleRL Table 1 (C_mid in GPU-hours)
        r = study(fit["A"], fit["B"], fit["C_mid"], seeds=args.seeds, noise=args.noise, bootstrap=args.bootstrap)
        cells = [str(r[c]) if isinstance(r[c], int) else f"{r[c]:.4f}" if c[0] == "d" else f"{r[c]:.2f}" for c in cols]
        print(f"| {name} | " + " | ".join(cells) + " |")

if __name__ == "__main__":
    main()
