"""Expert-parallel collectives over gloo, and their autograd-aware forms.

With one rank every collective degenerates to a local op (no process group is created), so the
same model code runs for EP=1 and EP>1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.distributed as dist


class _Done:
    """Stand-in for a finished async Work handle (world size 1)."""

    def wait(self) -> bool:
        return True


@dataclass(frozen=True)
class Comm:
    rank: int
    world: int

    @property
    def distributed(self) -> bool:
        return self.world > 1

    def all_gather(self, t: torch.Tensor) -> torch.Tensor:
        """Concatenate every rank's tensor along dim 0 (all ranks pass the same shape)."""
        if not self.distributed:
            return t
        t = t.contiguous()
        parts = [torch.empty_like(t) for _ in range(self.world)]
        dist.all_gather(parts, t)
        return torch.cat(parts, 0)

    def all_to_all(
        self,
        t: torch.Tensor,
        out_splits: list[int],
        in_splits: list[int],
        async_op: bool = False,
        out: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, Any]:
        """Exact-split all_to_all_single along dim 0; returns (output, work-or-None)."""
        if not self.distributed:
            res = t.clone() if out is None else out.copy_(t)
            return res, (_Done() if async_op else None)
        t = t.contiguous()
        if out is None:
            out = t.new_empty((sum(out_splits),) + tuple(t.shape[1:]))
        work = dist.all_to_all_single(out, t, out_splits, in_splits, async_op=async_op)
        return out, work

    def reduce_scatter(self, t: torch.Tensor) -> torch.Tensor:
        """Sum over ranks, keep this rank's 1/world slice of dim 0 (gloo has no reduce_scatter,
        so it is an all_to_all of equal chunks followed by a local sum)."""
        if not self.distributed:
            return t
        n = t.shape[0] // self.world
        out, _ = self.all_to_all(t, [n] * self.world, [n] * self.world)
        return out.view(self.world, n, *t.shape[1:]).sum(0)

    def all_reduce_(self, t: torch.Tensor) -> torch.Tensor:
        if self.distributed:
            dist.all_reduce(t)
        return t

    def exchange_counts(self, send_counts: torch.Tensor) -> torch.Tensor:
        """send_counts[..., dest] → recv_counts[..., src]: one small int all_to_all (dim 0 = dest)."""
        if not self.distributed:
            return send_counts.clone()
        recv = torch.empty_like(send_counts)
        dist.all_to_all_single(recv, send_counts.contiguous())
        return recv


def _mirrored(
    there: Callable[[Comm, torch.Tensor], torch.Tensor], back: Callable[[Comm, torch.Tensor], torch.Tensor]
) -> Any:
    """forward and backward of a collective whose gradient is its mirror (all_gather's is reduce_scatter,
    and the other way round); one Function class each, so autograd still names the nodes apart."""

    def forward(ctx: Any, x: torch.Tensor, comm: Comm) -> torch.Tensor:
        ctx.comm = comm
        return there(comm, x)

    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return back(ctx.comm, grad.contiguous()), None

    return staticmethod(forward), staticmethod(backward)


class _AllGather(torch.autograd.Function):
    forward, backward = _mirrored(Comm.all_gather, Comm.reduce_scatter)


class _ReduceScatter(torch.autograd.Function):
    forward, backward = _mirrored(Comm.reduce_scatter, Comm.all_gather)


class _AllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, comm: Comm, out_splits: list[int], in_splits: list[int]) -> torch.Tensor:
        ctx.comm, ctx.out_splits, ctx.in_splits = comm, out_splits, in_splits
        return comm.all_to_all(x, out_splits, in_splits)[0]

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:
        back = ctx.comm.all_to_all(grad.contiguous(), ctx.in_splits, ctx.out_splits)[0]
        return back, None, None, None


def gather_from_ranks(x: torch.Tensor, comm: Comm) -> torch.Tensor:
    return _AllGather.apply(x, comm) if comm.distributed else x


def reduce_scatter_to_ranks(x: torch.Tensor, comm: Comm) -> torch.Tensor:
    return _ReduceScatter.apply(x, comm) if comm.distributed else x


def all_to_all(x: torch.Tensor, comm: Comm, out_splits: list[int], in_splits: list[int]) -> torch.Tensor:
    return _AllToAll.apply(x, comm, out_splits, in_splits) if comm.distributed else x
