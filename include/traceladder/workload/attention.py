"""V4-shaped hybrid attention: sliding window (ratio 0) or a pooled/compressed KV (ratio r > 0)
plus the local window, behind three backends that compute the same masked attention:

- triton_v1: op by op (matmul, scale, masked_fill, softmax, matmul);
- gluon_v3:  one SDPA call with an explicit boolean mask;
- turbo:     as gluon_v3, and SDPA with is_causal where the window covers the sequence.

All three see the same keys: where the window divides the sequence, window-sized query chunks
see only [compressed | previous | own chunk] (O(S·(S/r + 2w)) instead of O(S·(S/r + S))), as
every V4 backend is sparse; the backends differ in the kernel, as the seed's do (within 3%).
"""

from __future__ import annotations

import functools

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.autograd.profiler import record_function
from .recompute import recompute

from . import ops
from .proxy_config import ProxyConfig


@functools.lru_cache(maxsize=64)
def full_mask(seq: int, ratio: int, window: int) -> torch.Tensor:
    """[S, Sc + S] bool, True = may attend: completed compressed blocks, then the causal window."""
    p = torch.arange(seq).unsqueeze(1)
    parts = []
    n_blocks = seq // ratio if ratio else 0
    if n_blocks:
        b = torch.arange(n_blocks).unsqueeze(0)
        parts.append((b + 1) * ratio - 1 <= p)
    kp = torch.arange(seq).unsqueeze(0)
    parts.append((kp <= p) & (p - kp < window))
    return torch.cat(parts, 1)


@functools.lru_cache(maxsize=64)
def chunk_mask(seq: int, ratio: int, window: int, heads: int) -> torch.Tensor:
    """[heads * n_chunks, w, Sc + 2w] bool for turbo's chunked path (query chunk c sees the
    compressed blocks and raw chunks c-1, c)."""
    w, n_chunks = window, seq // window
    n_blocks = seq // ratio if ratio else 0
    c = torch.arange(n_chunks).view(-1, 1, 1)
    p = c * w + torch.arange(w).view(1, -1, 1)
    parts = []
    if n_blocks:
        b = torch.arange(n_blocks).view(1, 1, -1)
        parts.append(((b + 1) * ratio - 1 <= p).expand(n_chunks, w, n_blocks))
    kp = (c - 1) * w + torch.arange(2 * w).view(1, 1, -1)
    parts.append((kp >= 0) & (kp <= p) & (p - kp < window))
    return torch.cat(parts, 2).repeat(heads, 1, 1).contiguous()


class Attention(nn.Module):
    # buffers (register_buffer): declared so that type checkers see tensors, not Tensor | Module
    cos: torch.Tensor
    sin: torch.Tensor
    freqs: torch.Tensor

    def __init__(self, s: ProxyConfig, ratio: int, backend: str) -> None:
        super().__init__()
        h = s.hidden_size
        self.heads, self.head_dim = s.num_attention_heads, h // s.num_attention_heads
        self.ratio, self.window, self.backend = ratio, s.attn_sliding_window, backend
        self.fused_rope = s.fusions.rope
        self.selective_recompute = s.recompute_granularity == "selective"
        self.wq = nn.Linear(h, h, bias=False)
        self.wkv = nn.Linear(h, 2 * h, bias=False)
        self.wo = nn.Linear(h, h, bias=False)
        cos, sin, freqs = ops.rope_tables(s.seq_length, self.head_dim)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        self.register_buffer("freqs", freqs, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with record_function("attention"):
            b, s, _ = x.shape
            q = self.wq(x).view(b, s, self.heads, self.head_dim)
            k, v = self.wkv(x).view(b, s, 2, self.heads, self.head_dim).unbind(2)
            q = ops.rope(q, self.cos[:s], self.sin[:s], self.freqs[:s], self.fused_rope)
            k = ops.rope(k, self.cos[:s], self.sin[:s], self.freqs[:s], self.fused_rope)
            q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [B, h, S, d]
            if self.selective_recompute:
                out = recompute(self.core, q, k, v)
            else:
                out = self.core(q, k, v)
            return self.wo(out.transpose(1, 2).reshape(b, s, -1))

    def compressed(self, t: torch.Tensor) -> torch.Tensor | None:
        """Mean-pool the sequence in blocks of `ratio` (the KV compression of CSA/HCA layers)."""
        n = t.shape[2] // self.ratio if self.ratio else 0
        if not n:
            return None
        b, h, _, d = t.shape
        return t[:, :, : n * self.ratio].reshape(b, h, n, self.ratio, d).mean(3)

    def core(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        seq = q.shape[2]
        kc, vc = self.compressed(k), self.compressed(v)
        if self.backend == "turbo" and kc is None and seq <= self.window:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        if seq % self.window == 0 and seq > self.window:
            return self._chunked(q, k, v, kc, vc)
        keys = k if kc is None else torch.cat([kc, k], 2)
        vals = v if vc is None else torch.cat([vc, v], 2)
        return self._masked(q, keys, vals, full_mask(seq, self.ratio, self.window))

    def _masked(self, q: torch.Tensor, keys: torch.Tensor, vals: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The backend's kernel: op by op (triton_v1) or one SDPA call (gluon_v3, turbo)."""
        if self.backend == "triton_v1":
            scores = torch.matmul(q, keys.transpose(-1, -2)).mul(self.head_dim**-0.5)
            scores = scores.masked_fill(~mask, float("-inf"))
            return torch.matmul(torch.softmax(scores, -1), vals)
        return F.scaled_dot_product_attention(q, keys, vals, attn_mask=mask)

    def _chunked(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kc: torch.Tensor | None, vc: torch.Tensor | None
    ) -> torch.Tensor:
        b, h, seq, d = q.shape
        w, n = self.window, seq // self.window

        def local(t: torch.Tensor, comp: torch.Tensor | None) -> torch.Tensor:
            padded = F.pad(t, (0, 0, w, 0)).view(b, h, n + 1, w, d)
            keys = torch.cat([padded[:, :, :-1], padded[:, :, 1:]], 3)  # [B, h, n, 2w, d]
            if comp is not None:
                keys = torch.cat([comp.unsqueeze(2).expand(b, h, n, comp.shape[2], d), keys], 3)
            return keys.reshape(b, h * n, -1, d)

        out = self._masked(q.reshape(b, h * n, w, d), local(k, kc), local(v, vc), chunk_mask(seq, self.ratio, w, h))
        return out.view(b, h, seq, d)
