"""The small elementwise chains that Primus's Triton fusion gates replace.

Each function has two real code paths with the same math: `fused=True` uses as few torch ops as
possible (the proxy's stand-in for one Triton kernel; torch.compile is too slow to start), and
`fused=False` spells the chain out op by op, one aten op per step, as the unfused model does.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import torch.nn.functional as F


class _FusedRMSNorm(torch.autograd.Function):
    """RMSNorm with hand-written forward and backward, one autograd node: what a fused kernel pair
    does. (torch.rms_norm is no help here: on CPU, torch 2.13 runs it as a composite of
    pow/mean/add/rsqrt/mul and autograd walks that decomposition op by op.)"""

    @staticmethod
    @torch.amp.custom_fwd(device_type="cpu", cast_inputs=torch.float32)
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        inv = torch.rsqrt(x.pow(2).mean(-1, keepdim=True).add_(eps))
        xhat = x * inv
        ctx.save_for_backward(xhat, inv, weight)
        return xhat * weight

    @staticmethod
    @torch.amp.custom_bwd(device_type="cpu")
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
        xhat, inv, weight = ctx.saved_tensors
        grad_w = (grad * xhat).reshape(-1, xhat.shape[-1]).sum(0)
        g = grad * weight
        return inv * (g - xhat * (g * xhat).mean(-1, keepdim=True)), grad_w, None


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


@functools.lru_cache(maxsize=8)
def _group_sums(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """[n*n, n*n] 0/1 matrices: x.view(T, n*n) @ M gives each entry its row's (or column's) sum,
    already broadcast back, so a half-iteration is one small matmul and one same-shape divide."""
    i = torch.arange(n * n)
    rows = (i.unsqueeze(1) // n == i.unsqueeze(0) // n).float()
    cols = (i.unsqueeze(1) % n == i.unsqueeze(0) % n).float()
    return rows, cols


class _FusedSinkhorn(torch.autograd.Function):
    """Sinkhorn with hand-written forward and backward, one autograd node: what the Triton kernel
    pair does (the n x n tile stays in one flat row). Forward keeps each half-iteration's output
    and broadcast sums; backward walks them in reverse (y = x / s → dx = (dy - (dy * y) @ M) / s),
    then the first softmax."""

    @staticmethod
    @torch.amp.custom_fwd(device_type="cpu", cast_inputs=torch.float32)
    def forward(ctx: Any, logits: torch.Tensor, iters: int) -> torch.Tensor:
        n = logits.shape[-1]
        rows, cols = (m.to(logits.dtype) for m in _group_sums(n))
        p = torch.softmax(logits, -1)
        flat = p.reshape(-1, n * n)
        saved = [p]
        for _ in range(iters):
            for m in (cols, rows):
                s = flat @ m
                flat = flat / s
                saved += [flat, s]
        ctx.iters, ctx.n = iters, n
        ctx.save_for_backward(*saved)
        return flat.view(p.shape)

    @staticmethod
    @torch.amp.custom_bwd(device_type="cpu")
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        first, *rest = ctx.saved_tensors
        rows, cols = (m.to(grad.dtype) for m in _group_sums(ctx.n))
        mats = [cols, rows] * ctx.iters
        g = grad.reshape(-1, ctx.n * ctx.n)
        for k in range(len(mats) - 1, -1, -1):
            y, s = rest[2 * k], rest[2 * k + 1]
            g = (g - (g * y) @ mats[k]) / s
        g = g.view(first.shape)
        return first * (g - (g * first).sum(-1, keepdim=True)), None


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
