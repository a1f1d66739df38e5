"""MegaMoE: one fused dispatch → grouped expert compute → combine, pipelined over token chunks
so that communication overlaps compute (use_turbo_mega_moe; replaces DeepEP and grouped GEMM).

Forward and backward are written by hand inside one autograd Function: chunk c+1's dispatch
all_to_all (async, on gloo's worker thread) is in flight while chunk c computes, and chunk c's
combine is posted async as soon as it is done. Expert ids ride in the dispatch payload as one
extra fp32 column, so each chunk costs a single collective each way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.autograd.profiler import record_function

from .comm import Comm
from .experts import Experts, bucket_slots, unpermute


@dataclass
class _Plan:
    comm: Comm
    n_local: int
    bounds: list[tuple[int, int]]  # row range of each chunk in the source-side row array
    send: list[list[int]]  # per chunk: rows to each destination rank
    recv: list[list[int]]  # per chunk: rows from each source rank


_Saved = tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]  # buckets, fc1 out, slots


def _expert_fwd(
    x: torch.Tensor, local_e: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, n_local: int
) -> tuple[torch.Tensor, _Saved, int]:
    if not x.numel():
        return x.new_zeros(x.shape), (None, None, None), 0
    slot, cap, _ = bucket_slots(local_e, n_local)
    hid = x.shape[1]
    xb = x.new_zeros(n_local * cap, hid).index_copy_(0, slot, x).view(n_local, cap, hid)
    h = torch.bmm(xb, w1)
    a, b = h.chunk(2, -1)
    y = torch.bmm(torch.nn.functional.silu(a) * b, w2)
    return y.view(-1, hid).index_select(0, slot), (xb, h, slot), cap


def _expert_bwd(
    gy: torch.Tensor,
    saved: _Saved,
    cap: int,
    w1: torch.Tensor,
    w2: torch.Tensor,
    gw1: torch.Tensor,
    gw2: torch.Tensor,
    n_local: int,
) -> torch.Tensor:
    """SwiGLU MLP backward by hand on the padded buckets; accumulates into gw1/gw2."""
    xb, h, slot = saved
    if xb is None or h is None or slot is None:
        return gy.new_zeros(gy.shape)
    hid = gy.shape[1]
    gyb = gy.new_zeros(n_local * cap, hid).index_copy_(0, slot, gy).view(n_local, cap, hid)
    a, b = h.chunk(2, -1)
    sa = torch.sigmoid(a)
    silu = a * sa
    gw2.baddbmm_((silu * b).transpose(1, 2), gyb)
    dg = torch.bmm(gyb, w2.transpose(1, 2))
    dh = torch.cat([dg * b * sa * (1 + a * (1 - sa)), dg * silu], -1)
    gw1.baddbmm_(xb.transpose(1, 2), dh)
    return torch.bmm(dh, w1.transpose(1, 2)).view(-1, hid).index_select(0, slot)


def _pipeline(
    src: torch.Tensor,
    plan: _Plan,
    post_payload: Callable[[torch.Tensor, int, int], torch.Tensor],
    compute: Callable[[int, torch.Tensor], torch.Tensor],
    out: torch.Tensor,
) -> None:
    """Chunked dispatch/compute/combine: chunk c+1 travels while chunk c computes."""
    comm, n = plan.comm, len(plan.bounds)

    def post(c: int) -> tuple[torch.Tensor, Any]:
        lo, hi = plan.bounds[c]
        return comm.all_to_all(post_payload(src[lo:hi], lo, hi), plan.recv[c], plan.send[c], async_op=True)

    combines = []
    with record_function("moe_dispatch"):
        inflight = post(0) if n else None
    for c in range(n):
        with record_function("moe_dispatch"):
            nxt = post(c + 1) if c + 1 < n else None
            assert inflight is not None  # chunk c was posted: post(0) above, post(c) in the last round
            buf, work = inflight
            work.wait()
        with record_function("moe_experts"):
            y = compute(c, buf)
        with record_function("moe_combine"):
            lo, hi = plan.bounds[c]
            combines.append(comm.all_to_all(y, plan.send[c], plan.recv[c], async_op=True, out=out[lo:hi])[1])
        inflight = nxt
    with record_function("moe_combine"):
        for work in combines:
            work.wait()


class _MegaMoE(torch.autograd.Function):
    # Under --bf16 autocast the fused op still computes in fp32: the hand-written backward then
    # needs no dtype juggling (Primus's MegaMoE is bf16-only; the proxy's is precision-agnostic).
    @staticmethod
    @torch.amp.custom_fwd(device_type="cpu", cast_inputs=torch.float32)
    def forward(
        ctx: Any, rows: torch.Tensor, local_ids: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, plan: _Plan
    ) -> torch.Tensor:
        saved: list[torch.Tensor | None] = []
        caps: list[int] = []

        def payload(chunk: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
            # fused dispatch: the destination-local expert id travels as an extra fp32 column
            return torch.cat([chunk.float(), local_ids[lo:hi].float().unsqueeze(1)], 1)

        def compute(c: int, buf: torch.Tensor) -> torch.Tensor:
            y, tensors, cap = _expert_fwd(buf[:, :-1].to(rows.dtype), buf[:, -1].long(), w1, w2, plan.n_local)
            saved.extend(tensors)
            caps.append(cap)
            return y

        out = rows.new_empty(rows.shape)
        _pipeline(rows, plan, payload, compute, out)
        ctx.plan, ctx.caps = plan, caps
        # Through save_for_backward (not ctx attributes), so activation checkpointing can drop
        # and recompute the per-chunk buffers like any other saved activation.
        ctx.save_for_backward(w1, w2, *saved)
        return out

    @staticmethod
    @torch.amp.custom_bwd(device_type="cpu")
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        w1, w2, *saved = ctx.saved_tensors
        plan: _Plan = ctx.plan
        gw1, gw2 = torch.zeros_like(w1), torch.zeros_like(w2)

        def compute(c: int, buf: torch.Tensor) -> torch.Tensor:
            chunk = (saved[3 * c], saved[3 * c + 1], saved[3 * c + 2])
            return _expert_bwd(buf, chunk, ctx.caps[c], w1, w2, gw1, gw2, plan.n_local)

        grad = grad.contiguous().to(w1.dtype)
        grad_rows = grad.new_empty(grad.shape)
        _pipeline(grad, plan, lambda chunk, lo, hi: chunk, compute, grad_rows)
        return grad_rows, None, gw1, gw2, None


def mega_moe(
    x: torch.Tensor, idx: torch.Tensor, w: torch.Tensor, experts: Experts, comm: Comm, chunks: int
) -> torch.Tensor:
    n_tok, k = idx.shape
    n_local, world = experts.n_local, comm.world
    with record_function("moe_dispatch"):
        # Rows ordered chunk-major, then by expert (hence by destination rank) inside a chunk.
        per_chunk = -(-n_tok // chunks)
        flat_e = idx.reshape(-1)
        chunk_of = torch.arange(n_tok * k) // k // per_chunk
        order = torch.argsort(chunk_of * (n_local * world) + flat_e, stable=True)
        sorted_e = flat_e[order]
        dest = sorted_e // n_local
        n_chunks = int(chunk_of.max()) + 1
        send = torch.bincount(chunk_of[order] * world + dest, minlength=n_chunks * world).view(n_chunks, world)
        recv = comm.exchange_counts(send.t().contiguous())  # [src, chunk]
        rows = x.index_select(0, order // k)
        sizes = send.sum(1).tolist()
        starts = [sum(sizes[:c]) for c in range(n_chunks)]
        plan = _Plan(comm, n_local, [(a, a + n) for a, n in zip(starts, sizes)], send.tolist(), recv.t().tolist())
    y_rows = _MegaMoE.apply(rows, sorted_e - dest * n_local, experts.w1, experts.w2, plan)
    with record_function("moe_combine"):
        return unpermute(y_rows, order, w, n_tok, k)
