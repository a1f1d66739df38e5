"""The small elementwise chains that Primus's Triton fusion gates replace.

Each function has two real code paths with the same math. `fused=True` is the proxy's stand-in
for one Triton kernel: for RMSNorm and Sinkhorn one compiled kernel each way (kernels.py;
torch.compile is too slow to start), for the others as few torch ops as possible. `fused=False`
spells the chain out op by op, one aten op per step, as the unfused model does.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from . import kernels


def kernel_input(t: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    """`t` as a C-contiguous float32 array of `shape` for a kernel, copying only when it must
    (each torch call here is one more dispatch, the very cost a fused kernel saves)."""
    t = t.detach().view(shape) if t.is_contiguous() else t.detach().reshape(shape).contiguous()
    return t if t.dtype == torch.float32 else t.float()


def as_dtype(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return t if t.dtype == dtype else t.to(dtype)


class _FusedRMSNorm(torch.autograd.Function):
    """RMSNorm as one autograd node whose forward and backward are each one compiled kernel
    (kernels.py), as the fused Triton pair is. (torch.rms_norm is no help here: on CPU, torch 2.13
    runs it as a composite of pow/mean/add/rsqrt/mul and autograd walks that decomposition op by
    op; a hand-written torch forward and backward was no faster than the unfused chain.)"""

    @staticmethod
    @torch.amp.custom_fwd(device_type="cpu", cast_inputs=torch.float32)
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        rows, w = kernel_input(x, (-1, x.shape[-1])), kernel_input(weight, (-1,))
        out, inv_rms = torch.empty_like(rows), rows.new_empty(rows.shape[0])
        kernels.rms_norm_forward(rows.numpy(), w.numpy(), eps, out.numpy(), inv_rms.numpy())
        ctx.save_for_backward(rows, inv_rms, w)
        ctx.dtypes = (x.dtype, weight.dtype)
        return as_dtype(out.view(x.shape), x.dtype)

    @staticmethod
    @torch.amp.custom_bwd(device_type="cpu")
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
        rows, inv_rms, w = ctx.saved_tensors
        g = kernel_input(grad, tuple(rows.shape))
        dx, dw = torch.empty_like(rows), torch.empty_like(w)
        kernels.rms_norm_backward(g.numpy(), rows.numpy(), inv_rms.numpy(), w.numpy(), dx.numpy(), dw.numpy())
        x_dtype, w_dtype = ctx.dtypes
        return as_dtype(dx.view(grad.shape), x_dtype), as_dtype(dw, w_dtype), None


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, fused: bool) -> torch.Tensor:
    if fused:
        return _FusedRMSNorm.apply(x, weight, eps)
    var = x.pow(2).mean(-1, keepdim=True)
    inv = torch.rsqrt(var.add(eps))
    return x.mul(inv).mul(weight)


def rope_tables(seq: int, dim: int, theta: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(cos, sin, complex freqs) for interleaved pairs, shaped [seq, dim/2]."""
    inv = 1.0 / theta ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim)
    ang = torch.outer(torch.arange(seq, dtype=torch.float32), inv)
    return ang.cos(), ang.sin(), torch.polar(torch.ones_like(ang), ang)


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, freqs: torch.Tensor, fused: bool) -> torch.Tensor:
    """Rotate interleaved pairs of x [B, S, heads, d]; tables are [S, d/2]."""
    if fused:
        # One complex multiply rotates every pair at once.
        xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
        out = torch.view_as_real(xc * freqs[None, :, None, :]).flatten(-2)
        return out.type_as(x)
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    x1, x2 = x[..., 0::2], x[..., 1::2]
    o1 = x1.mul(c).sub(x2.mul(s))
    o2 = x1.mul(s).add(x2.mul(c))
    return torch.stack((o1, o2), -1).flatten(-2)


def sigmoid(x: torch.Tensor, fused: bool) -> torch.Tensor:
    if fused:
        return torch.sigmoid(x)
    return x.neg().exp().add(1.0).reciprocal()


class _FusedSinkhorn(torch.autograd.Function):
    """Sinkhorn as one autograd node whose forward and backward are each one compiled kernel
    (kernels.py), as the Triton pair is one launch each. The forward keeps every half-iteration's
    matrix and sums, as an unfused chain's autograd graph would; the backward walks them in
    reverse."""

    @staticmethod
    @torch.amp.custom_fwd(device_type="cpu", cast_inputs=torch.float32)
    def forward(ctx: Any, logits: torch.Tensor, iters: int) -> torch.Tensor:
        n = logits.shape[-1]
        x = kernel_input(logits, (-1, n, n))
        out = torch.empty_like(x)
        iterates = x.new_empty(2 * iters + 1, n, n, x.shape[0])
        sums = x.new_empty(2 * iters, n, x.shape[0])
        kernels.sinkhorn_forward(x.numpy(), iters, out.numpy(), iterates.numpy(), sums.numpy())
        ctx.save_for_backward(iterates, sums)
        ctx.dtype = logits.dtype
        return as_dtype(out.view(logits.shape), logits.dtype)

    @staticmethod
    @torch.amp.custom_bwd(device_type="cpu")
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        iterates, sums = ctx.saved_tensors
        n = grad.shape[-1]
        g = kernel_input(grad, (-1, n, n))
        dlogits = torch.empty_like(g)
        kernels.sinkhorn_backward(g.numpy(), iterates.numpy(), sums.numpy(), dlogits.numpy())
        return as_dtype(dlogits.view(grad.shape), ctx.dtype), None


def sinkhorn(logits: torch.Tensor, iters: int, fused: bool, eps: float = 1e-6) -> torch.Tensor:
    """Doubly-stochastic projection of exp(logits) over the last two dims (mHC's residual mix)."""
    if fused:
        return _FusedSinkhorn.apply(logits, iters)
    p = logits.sub(logits.amax(-1, keepdim=True)).exp()
    p = p.mul(p.sum(-1, keepdim=True).add(eps).reciprocal())
    for _ in range(iters):
        for dim in (-2, -1):
            s = p.sum(dim, keepdim=True)
            p = p.mul(s.add(eps).reciprocal())
    return p


def hc_pre(h_pre: torch.Tensor, streams: torch.Tensor, fused: bool) -> torch.Tensor:
    """Mix the n residual streams [T, n, H] into one layer input [T, H] with weights [T, n]."""
    if fused:
        return torch.bmm(h_pre.unsqueeze(1), streams).squeeze(1)
    return h_pre.unsqueeze(-1).mul(streams).sum(1)


def hc_post(
    h_res: torch.Tensor, h_post: torch.Tensor, streams: torch.Tensor, y: torch.Tensor, fused: bool
) -> torch.Tensor:
    """streams' = H_res @ streams + h_post ⊗ y   ([T,n,n], [T,n], [T,n,H], [T,H] → [T,n,H])."""
    if fused:
        return torch.baddbmm(torch.bmm(h_res, streams), h_post.unsqueeze(-1), y.unsqueeze(1))
    mixed = h_res.unsqueeze(-1).mul(streams.unsqueeze(1)).sum(2)
    return mixed.add(h_post.unsqueeze(-1).mul(y.unsqueeze(1)))


def sqrt_softplus(x: torch.Tensor, fused: bool) -> torch.Tensor:
    """V4's router score function (sqrtsoftplus)."""
    if fused:
        return F.softplus(x).sqrt()
    # softplus(x) = relu(x) + log1p(exp(-|x|)), spelled out for stability
    return x.relu().add(x.abs().neg().exp().log1p()).sqrt()


def normalize_weights(w: torch.Tensor, fused: bool, eps: float = 1e-20) -> torch.Tensor:
    """Top-k weights → sum to one per token."""
    if fused:
        return w / w.sum(-1, keepdim=True)
    return w.mul(w.sum(-1, keepdim=True).add(eps).reciprocal())


def swiglu(h: torch.Tensor, limit: float = 0.0) -> torch.Tensor:
    """SwiGLU over [gate | up]; with a limit, V4's clamped form: gate clamped above, up both sides."""
    a, b = h.chunk(2, -1)
    if limit > 0:
        a, b = a.clamp(max=limit), b.clamp(-limit, limit)
    return F.silu(a) * b
