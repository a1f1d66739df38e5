"""Activation recomputation without torch.utils.checkpoint.

torch.utils.checkpoint imports dynamo on first use (~1.2 s and ~70 MB per rank), which at proxy
sizes outweighs the activations it saves and would turn "recompute off" into the rung with less
memory. This is Megatron's reentrant scheme: run the segment without autograd, keep its inputs,
and replay it with autograd in backward (collectives inside it run again, as on the GPU)."""

from __future__ import annotations

from typing import Any, Callable

import torch


def _nothing() -> None:
    return None


#: called after each replay's forward, when the replayed segment's activations are all alive
#: beside the rest of backward's (train.rank_process points it at the run's PeakMemory.sample)
after_replay: Callable[[], None] = _nothing


class _Recompute(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, run: Callable[..., torch.Tensor], *inputs: torch.Tensor) -> torch.Tensor:
        ctx.run = run
        # The replay runs in backward, outside the caller's autocast: restore it, as
        # torch.utils.checkpoint does, or a --bf16 replay computes in another dtype than the forward.
        ctx.autocast = (torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"))
        ctx.save_for_backward(*inputs)
        with torch.no_grad():
            return run(*inputs)

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[Any, ...]:
        inputs = [t.detach().requires_grad_(t.requires_grad) for t in ctx.saved_tensors]
        enabled, dtype = ctx.autocast
        with torch.enable_grad(), torch.autocast("cpu", dtype=dtype, enabled=enabled):
            out = ctx.run(*inputs)
        after_replay()
        torch.autograd.backward(out, grad_out)
        return (None, *(t.grad if t.requires_grad else None for t in inputs))


def recompute(run: Callable[..., torch.Tensor], *inputs: torch.Tensor) -> torch.Tensor:
    """`run(*inputs)`, keeping only `inputs` for backward (one tensor out)."""
    return _Recompute.apply(run, *inputs)
