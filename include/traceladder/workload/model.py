"""DeepSeek-V4-Flash-shaped model: embedding → n hyper-connection residual streams → layers of
[hybrid attention, MoE], each sublayer wrapped in mHC (Sinkhorn-projected stream mixing) → head.

Parameters are initialised so that every EP world size builds the same model: dense weights from
one seeded generator in a fixed order, each expert from its own (seed, layer, expert) generator,
so a rank creates only its own experts and still matches the single-rank model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import torch
import torch.nn as nn
from torch.autograd.profiler import record_function
from .recompute import recompute

from . import ops
from .attention import Attention
from .comm import Comm
from .moe import MoE
from .proxy_config import ProxyConfig


class HyperConnection(nn.Module):
    """mHC: per-token pre/post weights over the n streams and a doubly-stochastic n x n mix."""

    def __init__(self, s: ProxyConfig) -> None:
        super().__init__()
        n, h = s.hc_mult, s.hidden_size
        self.n, self.iters, self.eps, self.fusions = n, s.hc_sinkhorn_iters, s.norm_epsilon, s.fusions
        self.norm = nn.Parameter(torch.ones(n * h))
        self.phi = nn.Parameter(torch.empty(n * h, 2 * n + n * n))
        # Start near the plain residual: strong diagonal in the stream mix.
        self.bias = nn.Parameter(torch.cat([torch.zeros(2 * n), 4.0 * torch.eye(n).flatten()]))

    def forward(
        self, streams: torch.Tensor, fn: Callable[[torch.Tensor], torch.Tensor], norm_w: torch.Tensor
    ) -> torch.Tensor:
        t, n, _ = streams.shape
        f = self.fusions
        z = ops.rms_norm(streams.reshape(t, -1), self.norm, self.eps, f.rmsnorm)
        logits = torch.addmm(self.bias, z, self.phi)
        pre, post, res = logits.split([n, n, n * n], -1)
        h_pre = ops.sigmoid(pre, f.hc)
        h_post = ops.sigmoid(post, f.hc) * 2.0
        h_res = ops.sinkhorn(res.reshape(t, n, n), self.iters, f.sinkhorn)
        y = fn(ops.rms_norm(ops.hc_pre(h_pre, streams, f.hc), norm_w, self.eps, f.rmsnorm))
        return ops.hc_post(h_res, h_post, streams, y.to(streams.dtype), f.hc)


class Block(nn.Module):
    def __init__(self, s: ProxyConfig, ratio: int, comm: Comm) -> None:
        super().__init__()
        backend = s.csa_attention_backend if ratio > 0 else s.attention_backend
        self.seq, self.mbs = s.seq_length, s.micro_batch_size
        self.attn_hc, self.moe_hc = HyperConnection(s), HyperConnection(s)
        self.attn_norm = nn.Parameter(torch.ones(s.hidden_size))
        self.moe_norm = nn.Parameter(torch.ones(s.hidden_size))
        self.attn = Attention(s, ratio, backend)
        self.moe = MoE(s, comm)

    def forward(self, streams: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
        b = streams.shape[0] // self.seq

        def attend(x: torch.Tensor) -> torch.Tensor:
            return self.attn(x.view(b, self.seq, -1)).reshape(x.shape)

        streams = self.attn_hc(streams, attend, self.attn_norm)
        return self.moe_hc(streams, lambda x: self.moe(x, token_ids), self.moe_norm)


class Model(nn.Module):
    def __init__(self, s: ProxyConfig, comm: Comm) -> None:
        super().__init__()
        self.settings, self.n = s, s.hc_mult
        self.embed = nn.Embedding(s.vocab_size, s.hidden_size)
        self.blocks = nn.ModuleList(Block(s, r, comm) for r in s.layer_ratios)
        self.final_norm = nn.Parameter(torch.ones(s.hidden_size))
        self.head = nn.Linear(s.hidden_size, s.vocab_size, bias=False)
        self.segments = _segments(s)
        self._init(s, comm)

    def block_list(self) -> list[Block]:
        """The blocks, typed (``nn.ModuleList`` hands out plain modules)."""
        return [cast(Block, b) for b in self.blocks]

    def _init(self, s: ProxyConfig, comm: Comm) -> None:
        gen = torch.Generator().manual_seed(s.seed)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if ".experts." in name or p.dim() < 2:
                    continue  # norms and biases keep their constructor values
                p.normal_(0.0, s.init_method_std, generator=gen)
            for layer, blk in enumerate(self.block_list()):
                ex = blk.moe.experts
                for e in range(ex.n_local):
                    g = torch.Generator().manual_seed(s.seed * 1_000_003 + layer * 65_537 + comm.rank * ex.n_local + e)
                    ex.w1[e].normal_(0.0, s.init_method_std, generator=g)
                    ex.w2[e].normal_(0.0, s.init_method_std, generator=g)

    def forward(self, tokens: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
        with record_function("embedding"):
            x = self.embed(tokens).reshape(-1, self.settings.hidden_size)
            streams = x.unsqueeze(1).expand(-1, self.n, -1).contiguous()
        blocks = self.block_list()
        for layers, recomputed in self.segments:
            run = _run_layers([blocks[i] for i in layers])
            if recomputed:
                # Megatron "full" recompute: keep only the segment input, replay it in backward.
                streams = recompute(run, streams, token_ids)
            else:
                streams = run(streams, token_ids)
        with record_function("output_head"):
            h = ops.rms_norm(
                streams.mean(1), self.final_norm, self.settings.norm_epsilon, self.settings.fusions.rmsnorm
            )
            return self.head(h)

    def expert_parameters(self) -> list[nn.Parameter]:
        return [p for n, p in self.named_parameters() if ".experts." in n]

    def dense_parameters(self) -> list[nn.Parameter]:
        return [p for n, p in self.named_parameters() if ".experts." not in n]


def _run_layers(blocks: list[Block]) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    def run(streams: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
        for blk in blocks:
            streams = blk(streams, token_ids)
        return streams

    return run


def _segments(s: ProxyConfig) -> list[tuple[list[int], bool]]:
    """(layer indices, checkpointed?) in order. block: each of the first N layers on its own;
    uniform: every layer, in groups of N."""
    n_layers, n = s.num_layers, s.recompute_num_layers
    if not s.recomputed_layers():
        return [(list(range(n_layers)), False)]
    if s.recompute_method == "uniform":
        return [(list(range(i, min(i + n, n_layers))), True) for i in range(0, n_layers, n)]
    first = min(n, n_layers)
    segs = [([i], True) for i in range(first)]
    return segs + ([(list(range(first, n_layers)), False)] if first < n_layers else [])
