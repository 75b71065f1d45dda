"""This rank's part of an update on N torchrun ranks: DDP or FSDP2 around the policy's decoder, its micro-batches,
and the gradients and statistics it reduces (rlx.run.distributed holds the process group; docs/cluster.md)."""

from __future__ import annotations

import inspect
import math
from contextlib import contextmanager, nullcontext

import torch

from rlx.models.forward import causal_lm
from rlx.run.device import STRATEGIES
from rlx.run.distributed import World


class DataParallel:
    """This rank's micro-batches, the module its forward runs through, and how its gradients meet the others'.
    One process: every micro-batch, the policy itself, nothing to reduce (bitwise the single-process update)."""

    def __init__(self, policy, world: World, strategy: str = "ddp", device: torch.device | None = None):
        self.world, self.strategy = world, strategy
        self.decoder = None  # the update's forward goes through this (DDP wrapper) when set
        self.loss_scale = 1.0
        self._layers: list = []
        self._extra: list[torch.nn.Parameter] = []
        if not world.distributed:
            return
        lm = causal_lm(policy)
        inside = {id(q) for q in lm.model.parameters()}
        # trainable tensors outside the decoder (a trainable head: full fine-tuning) are reduced by hand
        self._extra = [q for q in policy.parameters() if q.requires_grad and id(q) not in inside]
        if strategy == "ddp":
            from torch.nn.parallel import DistributedDataParallel

            ids = [device.index if device.index is not None else world.local_rank] if device is not None and device.type == "cuda" else None
            # buffers (packed quantized bases) are frozen replicas: never re-broadcast them every forward
            quiet = ({"forward_sync_buffers": False} if "forward_sync_buffers" in inspect.signature(DistributedDataParallel).parameters
                     else {"broadcast_buffers": False})
            self.decoder = DistributedDataParallel(lm.model, device_ids=ids, **quiet)
        elif strategy == "fsdp":
            from torch.distributed.fsdp import fully_shard

            for layer in lm.model.layers:  # embeddings, final norm and head stay whole (replicated)
                fully_shard(layer)
            self._layers = list(lm.model.layers)
        else:
            raise ValueError(f"trainer.strategy: '{strategy}' is not one of {list(STRATEGIES)}")
        # DDP and FSDP average over ranks; each rank's loss is its share of ONE global sum (full-batch token weights)
        self.loss_scale = float(world.size)

    def assign(self, micro: list) -> list[tuple[object, bool]]:
        """(micro-batch, live) pairs: micro[rank::size], padded with dead repeats (loss x 0) so that every rank runs
        the same forwards and backwards (DDP's synced backward and FSDP's all-gathers are collectives)."""
        if not self.world.distributed:
            return [(mb, True) for mb in micro]
        count = math.ceil(len(micro) / self.world.size)
        mine = [(mb, True) for mb in micro[self.world.rank:: self.world.size]]
        return mine + [(micro[0], False)] * (count - len(mine))

    def backward(self, loss: torch.Tensor, live: bool) -> None:
        """Backpropagate this rank's share of the global loss (x loss_scale); a dead repeat backpropagates zero."""
        (loss * (self.loss_scale if live else 0.0)).backward()

    def sync_after(self, last: bool):
        """DDP: gradients are all-reduced in the backward of the pass's last micro-batch only."""
        if self.strategy == "ddp" and self.decoder is not None and not last:
            return self.decoder.no_sync()
        return nullcontext()

    def reduce_grads(self) -> None:
        """Reduce the gradients DDP/FSDP do not see (trainable tensors outside the decoder) as they do theirs."""
        for q in self._extra:
            if q.grad is None:
                q.grad = torch.zeros_like(q)
            self.world.all_reduce(q.grad).div_(self.loss_scale)

    def reduce_stats(self, sums: dict[str, float], maxes: dict[str, float]) -> tuple[dict, dict]:
        """Sums and maxes of per-rank statistics over ranks (metric accumulators, token counts)."""
        if not self.world.distributed:
            return sums, maxes
        names = self.world.gather((sorted(sums), sorted(maxes)))  # a rank with no live micro-batch has none
        ks, km = sorted({k for a, _ in names for k in a}), sorted({k for _, b in names for k in b})
        s = self.world.all_reduce(torch.tensor([sums.get(k, 0.0) for k in ks], dtype=torch.float64))
        m = self.world.all_reduce(torch.tensor([maxes.get(k, -math.inf) for k in km] + [0.0], dtype=torch.float64),
                                  op="max")
        return dict(zip(ks, s.tolist())), dict(zip(km, m.tolist()))

    @contextmanager
    def gathered(self):
        """fsdp: layers gathered once, kept whole (ranks may decode unequal token counts), resharded after."""
        if not self._layers:
            yield
            return
        for layer in self._layers:
            layer.set_reshard_after_forward(False)
            layer.unshard()
        try:
            yield
        finally:
            for layer in self._layers:
                layer.reshard()
                layer.set_reshard_after_forward(True)

    # --- checkpoints: FSDP holds shards, a checkpoint holds whole tensors (collectives: every rank calls) ----
    @property
    def sharded(self) -> bool:
        return bool(self._layers)

    def gathered_trainable(self, policy) -> dict[str, torch.Tensor] | None:
        """fsdp: the whole trainable tensors by parameter name (the adapter file's); else None (read the module)."""
        if not self.sharded:
            return None
        return {n: (q.full_tensor() if hasattr(q, "full_tensor") else q).detach().cpu()
                for n, q in policy.named_parameters() if q.requires_grad}

    def optimizer_state(self, policy, opt) -> dict:
        """The optimizer's state to checkpoint (fsdp: gathered whole on rank 0, keyed by parameter name)."""
        if not self.sharded:
            return opt.state_dict()
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

        return get_optimizer_state_dict(policy, opt, options=StateDictOptions(full_state_dict=True, cpu_offload=True))

    def load_optimizer_state(self, policy, opt, state: dict) -> None:
        if not self.sharded:
            opt.load_state_dict(state)
            return
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        set_optimizer_state_dict(policy, opt, optim_state_dict=state, options=StateDictOptions(full_state_dict=True))

    def checksum(self, policy, whole: dict[str, torch.Tensor] | None = None) -> float:
        """A number that differs between ranks whose trainable weights differ (checked at every checkpoint).
        `whole`: what gathered_trainable returned, when the caller has it (fsdp: gathered once, not twice)."""
        whole = whole or self.gathered_trainable(policy) or {n: q for n, q in policy.named_parameters() if q.requires_grad}
        total = torch.zeros((), dtype=torch.float64)
        for i, name in enumerate(sorted(whole)):
            total += (i + 1) * whole[name].detach().double().sum().cpu()
        return float(total)
