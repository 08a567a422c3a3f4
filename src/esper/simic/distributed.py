"""Policy data parallelism across processes (`torchrun`): every rank runs its own envs with
distinct seeds; the PPO update averages gradients so that every rank holds one policy.

The policy is not wrapped in `DistributedDataParallel`. A PPO update runs a variable number of
minibatches (the KL early stop) over sequences whose LSTM passes DDP cannot bucket ahead of
time, and the gradients of a small policy fit one flat all-reduce. So the trainer averages them
itself, through the `all_reduce_mean` hook of `ppo_update`, and state dicts never carry a
`module.` prefix. Every collective here runs in the same order on every rank, whatever the data:
one per gradient step, one per KL check, one to merge observation statistics, one to reduce
the round's metrics.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.distributed as dist

from esper.simic.normalizer import RunningMeanStd

CPU = torch.device("cpu")

COLLECTIVE_TIMEOUT = datetime.timedelta(minutes=10)
"""A rank that waits this long for the others gives up with an error (never a silent hang);
`torchrun` then ends every worker."""


@dataclass(frozen=True)
class DistContext:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = CPU
    """Where collectives run: the policy's device (NCCL needs CUDA tensors)."""

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    # ----------------------------------------------------------------- collectives
    def all_reduce_mean(self, tensor: torch.Tensor) -> torch.Tensor:
        """The mean of `tensor` over ranks (the input itself when running alone)."""
        if not self.enabled:
            return tensor
        out = tensor.detach().to(self.device, copy=True)
        dist.all_reduce(out, op=dist.ReduceOp.SUM)
        return (out / self.world_size).to(tensor.device)

    def all_reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        return self._all_reduce(tensor, dist.ReduceOp.SUM)

    def all_reduce_max(self, tensor: torch.Tensor) -> torch.Tensor:
        return self._all_reduce(tensor, dist.ReduceOp.MAX)

    def _all_reduce(self, tensor: torch.Tensor, op: dist.ReduceOp) -> torch.Tensor:
        if not self.enabled:
            return tensor
        out = tensor.detach().to(self.device, copy=True)
        dist.all_reduce(out, op=op)
        return out.to(tensor.device)

    def all_gather(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        """`tensor` from every rank, in rank order (same shape on every rank)."""
        if not self.enabled:
            return [tensor]
        local = tensor.to(self.device).contiguous()
        out = [torch.empty_like(local) for _ in range(self.world_size)]
        dist.all_gather(out, local)
        return [t.to(tensor.device) for t in out]

    def broadcast_module(self, module: torch.nn.Module) -> None:
        """Every rank takes rank 0's parameters and buffers."""
        if not self.enabled:
            return
        for tensor in (*module.parameters(), *module.buffers()):
            dist.broadcast(tensor.data, src=0)

    def barrier(self) -> None:
        if self.enabled:
            dist.barrier()


SINGLE_PROCESS = DistContext()


def attempt_prefix(environ: Mapping[str, str]) -> str:
    """The store prefix of this launch attempt: `torchrun --max-restarts N` restarts every rank
    with `TORCHELASTIC_RESTART_COUNT` one higher, and by default shares its rendezvous store
    with the workers. That store outlives a restart, and a restarted group that used the same
    keys read the previous attempt's addresses: its first connect failed or hung
    (pytorch/pytorch#135712; on one node with torch 2.13, 3 of 6 restarts). Under a prefix of
    its own, each attempt's group meets only its own keys, so the plain launch line works."""
    return f"esper/attempt-{environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"


def init_distributed(device: torch.device) -> DistContext:
    """Join the process group when started by `torchrun` (WORLD_SIZE > 1); otherwise run alone.

    The backend follows the policy's device: NCCL for CUDA, gloo for CPU. The group meets in
    torchrun's store under a prefix per launch attempt (`attempt_prefix`)."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return DistContext()
    backend = "nccl" if device.type == "cuda" else "gloo"
    if device.type == "cuda":
        torch.cuda.set_device(device)  # object collectives and NCCL use the current device
    if not dist.is_initialized():
        store, rank, size = next(dist.rendezvous("env://", timeout=COLLECTIVE_TIMEOUT))
        store = dist.PrefixStore(attempt_prefix(os.environ), store)
        dist.init_process_group(backend=backend, store=store, rank=rank, world_size=size, timeout=COLLECTIVE_TIMEOUT)
    return DistContext(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0")), device)


def shutdown_distributed(graceful: bool = True) -> None:
    """Leave the process group. A graceful exit first waits for every rank, so that no rank tears
    its connections down while another still uses them (gloo aborts on that); after an error
    the wait is skipped, since the other ranks may never arrive."""
    if dist.is_available() and dist.is_initialized():
        if graceful:
            dist.barrier()
        dist.destroy_process_group()


def average_gradients(ctx: DistContext, module: torch.nn.Module) -> None:
    """One flat all-reduce of every gradient, then each gets the mean over ranks back."""
    if not ctx.enabled:
        return
    params = [p for p in module.parameters() if p.requires_grad]
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = ctx.all_reduce_mean(torch.cat([g.reshape(-1) for g in grads]))
    offset = 0
    for p in params:
        n = p.numel()
        p.grad = flat[offset : offset + n].view_as(p).clone()
        offset += n


def merge_observations(ctx: DistContext, normalizer: RunningMeanStd, raw: torch.Tensor) -> None:
    """Update `normalizer` with the raw observations of every rank, identically on each rank.

    Each rank reduces its batch to (count, mean, variance); the ranks' summaries are gathered and
    merged in rank order with the same parallel formula, so all ranks end with the same
    statistics without moving the observations themselves."""
    raw = raw.detach().to(torch.float64).reshape(-1, normalizer.mean.numel()).cpu()
    if not ctx.enabled:
        normalizer.update(raw)
        return
    count = torch.tensor([float(raw.shape[0])], dtype=torch.float64)
    mean = raw.mean(0) if raw.shape[0] else torch.zeros(raw.shape[1], dtype=torch.float64)
    var = raw.var(0, unbiased=False) if raw.shape[0] else torch.zeros(raw.shape[1], dtype=torch.float64)
    summaries = ctx.all_gather(torch.cat([count, mean, var]))
    dim = normalizer.mean.numel()
    for summary in summaries:
        normalizer.merge(int(summary[0]), summary[1 : 1 + dim], summary[1 + dim :])
