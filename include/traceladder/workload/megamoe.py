"""MegaMoE: one fused dispatch → grouped expert compute → combine, pipelined over token chunks
so that communication overlaps compute (use_turbo_mega_moe; replaces DeepEP and grouped GEMM).

Forward and backward are written by hand inside one autograd Function: chunk c+1's dispatch
all_to_all (async, on gloo's worker thread) is in flight while chunk c computes, and chunk c's
combine is posted async as soon as it is done. Expert ids ride in the dispatch payload as one
extra column of the activations' float type (fp32 in training; exact below 2**24), so each chunk
costs a single collective each way.

As the fused kernel, it reads its tokens where they are and writes its output where it goes: the
dispatch gathers each routed row straight into the payload, and the combine scales each returned
row by its routing weight and adds it into its token's row. No permuted copy of the tokens, and no
[tokens, top-k, hidden] array of outputs, exists outside the Function, so autograd has no gather,
scatter, multiply or sum of them to replay in backward. The layout (a counting sort by chunk and
expert), the payload gather, the per-expert bucketing and the weighted scatter home are each one
compiled kernel (kernels.py), as they are stages of one kernel in the real op.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.autograd.profiler import record_function

from . import kernels
from .comm import Comm
from .experts import Experts
from .ops import as_dtype, kernel_input


@dataclass
class _Plan:
    comm: Comm
    n_local: int
    bounds: list[tuple[int, int]]  # row range of each chunk in the source-side row array
    send: list[list[int]]  # per chunk: rows to each destination rank
    recv: list[list[int]]  # per chunk: rows from each source rank
    limit: float  # the clamped SwiGLU's limit (0: plain)
    token: torch.Tensor  # the token each source-side row (a routed (token, slot) pair) belongs to
    local_ids: torch.Tensor  # each source-side row's expert id on its destination rank (int64)


# per chunk: buckets, the first GEMM's output [gate | up], slots (None when the chunk has no rows)
_Saved = tuple[torch.Tensor | None, ...]


def _np(t: torch.Tensor) -> Any:
    """The kernels' view of a tensor (C-contiguous: copied only if it is not)."""
    return t.detach().contiguous().numpy()


def _buckets(rows: torch.Tensor, slot: torch.Tensor, n_local: int, cap: int, hid: int) -> torch.Tensor:
    """The first `hid` columns of rows scattered into [E, cap, hid] buckets. Padding rows must be
    zero (their garbage would meet a zero grad in the wgrad GEMMs: 0 x NaN); with no padding
    (balanced routing) nothing is filled."""
    padded = n_local * cap != rows.shape[0]
    out = (torch.zeros if padded else torch.empty)(n_local * cap, hid, dtype=rows.dtype)
    kernels.scatter_rows(_np(rows), _np(slot), out.numpy())
    return out.view(n_local, cap, hid)


def _expert_fwd(
    payload: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, n_local: int, limit: float
) -> tuple[torch.Tensor, _Saved, int]:
    """The expert MLPs on received payload rows ([rows, H + 1]: the id column last) → [rows, H]."""
    hid = payload.shape[1] - 1
    if not payload.shape[0]:
        return payload.new_zeros(0, hid), (None,) * 3, 0
    slot = torch.empty(payload.shape[0], dtype=torch.int64)
    cap = kernels.payload_slots(_np(payload), n_local, slot.numpy())
    xb = _buckets(payload, slot, n_local, cap, hid)
    h = torch.bmm(xb, w1)  # [E, cap, 2F]: gate | up
    act = torch.empty(*h.shape[:2], h.shape[2] // 2)  # float32, the kernels' type
    kernels.swiglu_forward(kernel_input(h, (-1, h.shape[2])).numpy(), limit, act.view(-1, act.shape[2]).numpy())
    y = torch.bmm(as_dtype(act, h.dtype), w2)
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
    limit: float,
) -> torch.Tensor:
    """The expert MLP's backward by hand on the buckets, the SwiGLU's in one kernel, the weight
    grads accumulated in place into gw1/gw2 (the fused kernel's wgrad accumulation: no
    per-micro-batch grad tensor to add)."""
    xb, h, slot = saved
    if xb is None or h is None or slot is None:
        return gy.new_zeros(gy.shape)
    gyb = _buckets(gy, slot, n_local, cap, gy.shape[1])
    dact = torch.bmm(gyb, w2.transpose(1, 2))
    dh, act = torch.empty(h.shape), torch.empty(dact.shape)  # float32, the kernels' type
    kernels.swiglu_backward(
        kernel_input(dact, (-1, dact.shape[2])).numpy(),
        kernel_input(h, (-1, h.shape[2])).numpy(),
        limit,
        dh.view(-1, dh.shape[2]).numpy(),
        act.view(-1, act.shape[2]).numpy(),
    )
    dh, act = as_dtype(dh, h.dtype), as_dtype(act, h.dtype)
    gw2.baddbmm_(act.transpose(1, 2), gyb)
    gw1.baddbmm_(xb.transpose(1, 2), dh)
    return torch.bmm(dh, w1.transpose(1, 2)).view(-1, gy.shape[1]).index_select(0, slot)


def _wgrad_targets(w1: torch.Tensor, w2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """Where the weight grads go: Megatron's DDP main_grad buffers when the weights have them
    (fused accumulation, as the fused kernel does; autograd then has no grad to hand back), else
    fresh tensors returned to autograd."""
    main1, main2 = getattr(w1, "main_grad", None), getattr(w2, "main_grad", None)
    if isinstance(main1, torch.Tensor) and isinstance(main2, torch.Tensor) and main1.dtype == w1.dtype:
        return main1, main2, True
    return torch.zeros_like(w1), torch.zeros_like(w2), False


def _pipeline(
    plan: _Plan,
    post_payload: Callable[[int, int], torch.Tensor],
    compute: Callable[[int, torch.Tensor], torch.Tensor],
    out: torch.Tensor,
) -> None:
    """Chunked dispatch/compute/combine: chunk c+1 travels while chunk c computes."""
    comm, n = plan.comm, len(plan.bounds)

    def post(c: int) -> tuple[torch.Tensor, Any]:
        lo, hi = plan.bounds[c]
        return comm.all_to_all(post_payload(lo, hi), plan.recv[c], plan.send[c], async_op=True)

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
        ctx: Any, x: torch.Tensor, row_weight: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, plan: _Plan
    ) -> torch.Tensor:
        saved: list[torch.Tensor | None] = []
        caps: list[int] = []
        hid = x.shape[1]

        x_np = _np(x)

        def payload(lo: int, hi: int) -> torch.Tensor:
            # fused dispatch: the routed tokens gathered straight into the payload, the
            # destination-local expert id beside them as one more column
            buf = x.new_empty(hi - lo, hid + 1)
            kernels.gather_payload(x_np, plan.token[lo:hi].numpy(), plan.local_ids[lo:hi].numpy(), buf.numpy())
            return buf

        def compute(c: int, buf: torch.Tensor) -> torch.Tensor:
            y, tensors, cap = _expert_fwd(buf, w1, w2, plan.n_local, plan.limit)
            saved.extend(tensors)
            caps.append(cap)
            return y

        y_rows = x.new_empty(plan.token.numel(), hid)
        _pipeline(plan, payload, compute, y_rows)
        with record_function("moe_combine"):
            # fused combine: each row scaled by its routing weight, added into its token's row
            out = x.new_empty(x.shape)
            kernels.scatter_add_rows(y_rows.numpy(), _np(row_weight), plan.token.numpy(), out.numpy())
        ctx.plan, ctx.caps = plan, caps
        ctx.weights = (w1, w2)  # the parameters themselves: their main_grad, if any, takes the wgrad
        # Through save_for_backward (not ctx attributes), so activation checkpointing can drop
        # and recompute the per-chunk buffers like any other saved activation.
        ctx.save_for_backward(row_weight, y_rows, w1, w2, *saved)
        return out

    @staticmethod
    @torch.amp.custom_bwd(device_type="cpu")
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        row_weight, y_rows, w1, w2, *saved = ctx.saved_tensors
        plan: _Plan = ctx.plan
        gw1, gw2, fused_accumulation = _wgrad_targets(ctx.weights[0], ctx.weights[1])

        def compute(c: int, buf: torch.Tensor) -> torch.Tensor:
            return _expert_bwd(
                buf, tuple(saved[3 * c : 3 * c + 3]), ctx.caps[c], w1, w2, gw1, gw2, plan.n_local, plan.limit
            )

        with record_function("moe_combine"):
            grad_rows = y_rows.new_empty(y_rows.shape)
            grad_weight = row_weight.new_empty(row_weight.shape)
            kernels.gather_scale_dot(
                _np(as_dtype(grad, w1.dtype)),
                plan.token.numpy(),
                _np(row_weight),
                _np(y_rows),
                grad_rows.numpy(),
                grad_weight.numpy(),
            )
        grad_in = torch.empty_like(grad_rows)
        _pipeline(plan, lambda lo, hi: grad_rows[lo:hi], compute, grad_in)
        with record_function("moe_dispatch"):
            grad_x = grad_in.new_empty(grad.shape)
            kernels.scatter_add_rows(grad_in.numpy(), grad_in.new_empty(0).numpy(), plan.token.numpy(), grad_x.numpy())
            grad_x = as_dtype(grad_x, grad.dtype)
        if fused_accumulation:
            return grad_x, grad_weight, None, None, None
        return grad_x, grad_weight, gw1, gw2, None


def mega_moe(
    x: torch.Tensor, idx: torch.Tensor, w: torch.Tensor, experts: Experts, comm: Comm, chunks: int
) -> torch.Tensor:
    n_tok, k = idx.shape
    n_local, world = experts.n_local, comm.world
    with record_function("moe_dispatch"):
        # Rows ordered chunk-major, then by expert (hence by destination rank) inside a chunk.
        per_chunk = max(1, -(-n_tok // chunks))
        n_chunks = max(1, -(-n_tok // per_chunk))
        order, token, local_ids = (torch.empty(n_tok * k, dtype=torch.int64) for _ in range(3))
        send = torch.empty(n_chunks, world, dtype=torch.int64)
        kernels.moe_plan(
            _np(idx.reshape(-1).long()),
            k,
            per_chunk,
            n_local,
            order.numpy(),
            token.numpy(),
            local_ids.numpy(),
            send.numpy(),
        )
        recv = comm.exchange_counts(send.t().contiguous())  # [src, chunk]
        sizes = send.sum(1).tolist()
        starts = [sum(sizes[:c]) for c in range(n_chunks)]
        bounds = [(a, a + n) for a, n in zip(starts, sizes)]
        plan = _Plan(comm, n_local, bounds, send.tolist(), recv.t().tolist(), experts.limit, token, local_ids)
        row_weight = w.reshape(-1)[order]
    return _MegaMoE.apply(x, row_weight, experts.w1, experts.w2, plan)
