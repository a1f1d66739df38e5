"""This rank's experts, which moe.py and megamoe.py share (its own module, so neither imports the
other for it); the grouped path's padded per-expert buckets (MegaMoE makes the same slots in one
compiled kernel, and the tests hold the two equal); and moe.py's un-permute back to token order,
which MegaMoE fuses into its combine."""

from __future__ import annotations

import torch
import torch.nn as nn
from torch.autograd.profiler import record_function

from . import ops
from .proxy_config import ProxyConfig


def bucket_slots(local_e: torch.Tensor, n_experts: int) -> tuple[torch.Tensor, int, torch.Tensor]:
    """For rows tagged with a local expert id: (slot of each row in a [E * cap] padded bucket
    array, cap = the largest per-expert count, per-expert counts)."""
    counts = torch.bincount(local_e, minlength=n_experts)
    cap = int(counts.max()) if local_e.numel() else 0
    order = torch.argsort(local_e, stable=True)
    starts = counts.cumsum(0) - counts
    sorted_e = local_e[order]
    slot = torch.empty_like(local_e)
    slot[order] = sorted_e * cap + torch.arange(local_e.numel()) - starts[sorted_e]
    return slot, cap, counts


def inverse_permutation(order: torch.Tensor) -> torch.Tensor:
    inv = torch.empty_like(order)
    inv[order] = torch.arange(order.numel())
    return inv


class Experts(nn.Module):
    """This rank's slice of the experts: SwiGLU MLPs stored stacked as [E_local, H, 2F] / [E_local, F, H]."""

    def __init__(self, s: ProxyConfig) -> None:
        super().__init__()
        e, h, f = s.local_experts, s.hidden_size, s.moe_ffn_hidden_size
        self.w1 = nn.Parameter(torch.empty(e, h, 2 * f))
        self.w2 = nn.Parameter(torch.empty(e, f, h))
        self.n_local, self.grouped, self.limit = e, s.grouped_gemm, s.swiglu_limit

    def forward(self, rows: torch.Tensor, local_e: torch.Tensor) -> torch.Tensor:
        """rows [N, H] sorted by local expert id `local_e` → outputs [N, H] in the same order."""
        with record_function("moe_experts"):
            if self.grouped:
                return self._grouped(rows, local_e)
            return self._loop(rows, local_e)

    def _loop(self, rows: torch.Tensor, local_e: torch.Tensor) -> torch.Tensor:
        counts = torch.bincount(local_e, minlength=self.n_local).tolist()
        # unbind once: indexing w1[e] per expert would make autograd allocate a full-size
        # gradient per expert in backward.
        w1s, w2s = self.w1.unbind(0), self.w2.unbind(0)
        outs = [
            ops.swiglu(chunk @ w1s[e], self.limit) @ w2s[e]
            for e, chunk in enumerate(torch.split(rows, counts))
            if counts[e]
        ]
        return torch.cat(outs) if outs else rows.new_zeros(rows.shape)

    def _grouped(self, rows: torch.Tensor, local_e: torch.Tensor) -> torch.Tensor:
        if not rows.numel():
            return rows.new_zeros(rows.shape)
        slot, cap, _ = bucket_slots(local_e, self.n_local)
        h = rows.shape[1]
        buckets = rows.new_zeros(self.n_local * cap, h).index_copy(0, slot, rows).view(self.n_local, cap, h)
        out = torch.bmm(ops.swiglu(torch.bmm(buckets, self.w1), self.limit), self.w2)
        return out.view(-1, h).index_select(0, slot)


def unpermute(y_rows: torch.Tensor, order: torch.Tensor, w: torch.Tensor, n_tok: int, k: int) -> torch.Tensor:
    """Rows in expert-sorted pair order → [T, H], each token the weighted sum of its k outputs."""
    pairs = y_rows.index_select(0, inverse_permutation(order)).view(n_tok, k, -1)
    return (pairs * w.unsqueeze(-1).to(pairs.dtype)).sum(1)
