"""MoE block: router, the two dispatcher paths, and the two expert-compute paths.

- dispatcher "allgather" (use_turbo_deepep False): every rank all-gathers all tokens, picks the
  (token, slot) pairs routed to its experts, and a reduce-scatter brings the weighted outputs home.
- dispatcher "alltoall" (use_turbo_deepep True): pairs are sorted by expert and sent with an
  exact-split all_to_all_single; the combine is the reverse all_to_all.
- experts: a Python loop over local experts (one mm pair each) or one grouped bmm over
  padded per-expert buckets (use_turbo_grouped_gemm / moe_grouped_gemm).
MegaMoE (use_turbo_mega_moe) lives in megamoe.py and replaces both; what both share (the expert
weights, bucketing, un-permuting) lives in experts.py.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.autograd.profiler import record_function

from . import ops
from .comm import Comm, all_to_all, gather_from_ranks, reduce_scatter_to_ranks
from .experts import Experts, inverse_permutation, unpermute
from .proxy_config import ProxyConfig


class Router(nn.Module):
    def __init__(self, s: ProxyConfig) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(s.num_experts, s.hidden_size))
        self.topk, self.n_experts = s.moe_router_topk, s.num_experts
        self.force_balance, self.fused = s.moe_router_force_load_balancing, s.fusions.router

    def forward(self, x: torch.Tensor, token_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with record_function("moe_router"):
            logits = F.linear(x.float(), self.weight.float())  # router in fp32, as moe_router_dtype fp32
            scores = ops.sqrt_softplus(logits, self.fused)
            if self.force_balance:
                # Uniform forced load: a fixed round-robin over experts keyed on the *global* token
                # index, so routing (and the loss) is independent of how tokens are split over ranks.
                slots = torch.arange(self.topk, device=x.device)
                idx = (token_ids.unsqueeze(1) * self.topk + slots) % self.n_experts
            else:
                idx = scores.topk(self.topk, -1).indices
            weights = ops.normalize_weights(scores.gather(1, idx), self.fused)
        return idx, weights.to(x.dtype)


def allgather_moe(x: torch.Tensor, idx: torch.Tensor, w: torch.Tensor, experts: Experts, comm: Comm) -> torch.Tensor:
    n_tok, k = idx.shape
    lo = comm.rank * experts.n_local
    with record_function("moe_dispatch"):
        # One all-gather carries tokens, routing weights and expert ids (as fp32 columns; exact
        # below 2**24); its backward is the reduce-scatter of the token and weight grads.
        packed = torch.cat([x.float(), w.float(), idx.float()], 1)
        gathered = gather_from_ranks(packed, comm)
        xa, wa, ia = gathered.split([x.shape[1], k, k], 1)
        ia = ia.detach().long()
        mine = (ia >= lo) & (ia < lo + experts.n_local)
        tok, slot = mine.nonzero(as_tuple=True)
        local_e = ia[tok, slot] - lo
        order = torch.argsort(local_e, stable=True)
        tok, slot, local_e = tok[order], slot[order], local_e[order]
        rows = xa.index_select(0, tok).to(x.dtype)
    y = experts(rows, local_e)
    with record_function("moe_combine"):
        y = y * wa[tok, slot].unsqueeze(-1).to(y.dtype)
        out_all = y.new_zeros(xa.shape[0], y.shape[1]).index_add(0, tok, y)
        return reduce_scatter_to_ranks(out_all, comm).to(x.dtype)


def alltoall_moe(x: torch.Tensor, idx: torch.Tensor, w: torch.Tensor, experts: Experts, comm: Comm) -> torch.Tensor:
    n_tok, k = idx.shape
    lo = comm.rank * experts.n_local
    with record_function("moe_dispatch"):
        flat_e = idx.reshape(-1)
        order = torch.argsort(flat_e, stable=True)  # by expert, hence by destination rank
        sorted_e = flat_e[order]
        send_counts = torch.bincount(sorted_e // experts.n_local, minlength=comm.world)
        recv_counts = comm.exchange_counts(send_counts)
        in_splits, out_splits = send_counts.tolist(), recv_counts.tolist()
        rows = x.index_select(0, order // k)
        recv_rows = all_to_all(rows, comm, out_splits, in_splits)
        recv_e = comm.all_to_all(sorted_e, out_splits, in_splits)[0] - lo
        order2 = torch.argsort(recv_e, stable=True)  # rows from several sources → one expert order
        rows2 = recv_rows.index_select(0, order2)
    y2 = experts(rows2, recv_e[order2])
    with record_function("moe_combine"):
        y_recv = y2.index_select(0, inverse_permutation(order2))
        y_rows = all_to_all(y_recv, comm, in_splits, out_splits)
        return unpermute(y_rows, order, w, n_tok, k)


class MoE(nn.Module):
    def __init__(self, s: ProxyConfig, comm: Comm) -> None:
        super().__init__()
        self.router, self.experts, self.comm = Router(s), Experts(s), comm
        self.dispatcher, self.chunks = s.dispatcher, s.mega_moe_chunks

    def forward(self, x: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
        idx, w = self.router(x, token_ids)
        if self.dispatcher == "mega_moe":
            from .megamoe import mega_moe

            return mega_moe(x, idx, w, self.experts, self.comm, self.chunks)
        if self.dispatcher == "alltoall":
            return alltoall_moe(x, idx, w, self.experts, self.comm)
        return allgather_moe(x, idx, w, self.experts, self.comm)
