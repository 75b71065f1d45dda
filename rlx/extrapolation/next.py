"""NExt's extrapolator: rank-1 records, a predictor per shape bucket trained at each extend step, the jump folded in."""

from collections import defaultdict
from pathlib import Path

import torch

from rlx.extrapolation.extrapolator import Extrapolator
from rlx.extrapolation.fit_cache import train_or_load
from rlx.extrapolation.fold import fold_rank1
from rlx.extrapolation.lora import snapshot
from rlx.extrapolation.predictor import PredictorFit, decode_triplet, encode_triplet, train_predictor
from rlx.extrapolation.records import TrajectoryRecords


class NextExtrapolator(Extrapolator):
    """NExt predict-extend. Each jump claims alpha * horizon steps saved."""

    kind = "next"

    def __init__(self, cfg, total_steps):
        super().__init__(cfg, total_steps)
        self.records = TrajectoryRecords(int(cfg.interval), int(cfg.horizon), bool(cfg.store_on_cpu))
        self.fits: dict[tuple[int, int], PredictorFit] = {}  # (out, in) bucket -> fitted predictor
        self.last_prediction: dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}  # not in state

    def _n_records(self):
        return len(self.records.records)

    def _start(self, modules):
        with self.timer("records"):
            self.records.start(modules, snapshot(modules, bool(self.cfg.store_on_cpu)))

    def _on_step(self, modules, step):
        if step % self.records.interval == 0 and step <= self.extend_at[-1]:
            self.records.record(step, modules, self.timer)

    def _bucket_rows(self, modules, steps, with_targets: bool):
        """{(out, in): (global [N, d], local [N, d], target [N, d] | None, keys [(step, name)])}, d = out + in."""
        device = modules[0].A.device
        rows = defaultdict(lambda: ([], [], [], []))
        for t in steps:
            rec, tgt = self.records.records[t], self.records.targets.get(t)
            for m in modules:
                g, l, y, keys = rows[(m.out_features, m.in_features)]
                g.append(encode_triplet(rec[m.name]["global"]).to(device))
                l.append(encode_triplet(rec[m.name]["local"]).to(device))
                if with_targets:
                    y.append(encode_triplet(tgt[m.name]).to(device))
                keys.append((t, m.name))
        return {shape: (torch.stack(g), torch.stack(l), torch.stack(y) if with_targets else None, keys)
                for shape, (g, l, y, keys) in sorted(rows.items())}

    def _train(self, modules) -> None:
        steps = self.records.pairs()
        if not steps:
            raise RuntimeError("extrapolation: no training pairs (record, target) available for the predictor")
        cfg = self.cfg
        self.fits, first, last, counts, stored = {}, [], [], [], 0
        for shape, (g, l, y, _) in self._bucket_rows(modules, steps, with_targets=True).items():
            settings = dict(hidden=int(cfg.hidden), epochs=int(cfg.epochs), lr=float(cfg.lr),
                            min_lr_ratio=float(cfg.min_lr_ratio), weight_decay=float(cfg.weight_decay),
                            seed=int(cfg.seed) * 1_000_003 + len(self.jumps) * 7_919 + shape[0] * 31 + shape[1])
            if getattr(cfg, "fit_cache", None):  # arms that share their records up to here share the fit (fit_cache.py)
                fit, hit = train_or_load(Path(cfg.fit_cache), g, l, y, **settings)
                stored += hit
            else:
                fit = train_predictor(g, l, y, **settings)
            self.fits[shape] = fit
            first.append(fit.loss_first)
            last.append(fit.loss_last)
            counts.append(g.shape[0])
        n = sum(counts)
        self.predictor_loss = sum(c * x for c, x in zip(counts, last)) / n
        self._jump_metrics["extrap/predictor_loss_first"] = sum(c * x for c, x in zip(counts, first)) / n
        self._jump_metrics["extrap/predictor_pairs"] = float(len(steps))
        self._jump_metrics["extrap/predictor_fits_stored"] = float(stored)  # buckets read from fit_cache, not trained

    def predict(self, modules, step: int) -> dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """{name: (u [out], sigma, v [in])}: the predicted next-horizon update from the record at `step`."""
        preds = {}
        for shape, (g, l, _, keys) in self._bucket_rows(modules, [step], with_targets=False).items():
            out = self.fits[shape].predict(g, l)  # [N, out + in]
            for (_, name), x in zip(keys, out):
                preds[name] = decode_triplet(x, shape[0])
        return {m.name: preds[m.name] for m in modules}

    def _jump(self, modules, step):
        with self.timer("predictor"):
            self._train(modules)
            preds = self.predict(modules, step)
        self.last_prediction = preds
        sig, cos, lost = [], [], []
        with self.timer("svd"):
            for m in modules:
                u, sigma, v = preds[m.name]
                jump = self.alpha * sigma
                if jump == 0:
                    continue
                A_new, B_new, dropped = fold_rank1(m.A.detach(), m.B.detach(), m.scaling, u, jump, v)
                self._write(m, A_new, B_new)
                ul, _, vl = self.records.records[step][m.name]["local"]
                sig.append(float(jump))
                cos.append(float(torch.dot(u, ul.to(u)) * torch.dot(v, vl.to(v))))
                lost.append(float(torch.linalg.norm(dropped)) * abs(m.scaling) / abs(float(jump)))
        self.records.after_jump(step, modules, self.timer)
        self.steps_saved += self.alpha * self.records.horizon
        if sig:
            self._jump_metrics.update({"extrap/jump_sigma_mean": sum(sig) / len(sig),
                                       "extrap/jump_cos_local": sum(cos) / len(cos),
                                       "extrap/fold_rel_error": sum(lost) / len(lost)})

    def state_dict(self):
        sd = super().state_dict()
        sd["records"] = self.records.state_dict()
        sd["predictors"] = {shape: f.state() for shape, f in self.fits.items()}
        return sd

    def load_state_dict(self, sd):
        super().load_state_dict(sd)
        self.records.load_state_dict(sd["records"])
        self.fits = {(int(n_out), int(n_in)): PredictorFit.from_state(p, int(n_out) + int(n_in))
                     for (n_out, n_in), p in sd["predictors"].items()}
