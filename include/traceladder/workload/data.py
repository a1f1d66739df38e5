"""Mock data: the same global batch every step whatever the EP world size.

Each step's global batch is drawn from a generator seeded by (seed, iteration); a rank takes the
sequences of its micro-batches from it. Sequences are a random walk mod vocab (next = prev + 1..3),
so the loss has something to learn and visibly falls, unlike uniform noise.
"""

from __future__ import annotations

import torch

from .proxy_config import ProxyConfig


class MockData:
    def __init__(self, s: ProxyConfig, rank: int) -> None:
        self.s, self.rank = s, rank
        self._it, self._batch = -1, torch.empty(0, dtype=torch.long)

    def _global(self, it: int) -> torch.Tensor:
        if it != self._it:
            s = self.s
            g = torch.Generator().manual_seed(s.seed * 7_919 + it)
            start = torch.randint(0, s.vocab_size, (s.global_batch_size, 1), generator=g)
            steps = torch.randint(1, 4, (s.global_batch_size, s.seq_length), generator=g)
            walk = torch.cat([torch.zeros_like(start), steps.cumsum(1)], 1)
            self._it, self._batch = it, (start + walk) % s.vocab_size
        return self._batch

    def micro_batch(self, it: int, m: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(tokens [mbs, S], labels [mbs, S], global token ids [mbs * S]) for micro-batch m."""
        s = self.s
        first = (m * s.world_size + self.rank) * s.micro_batch_size
        seqs = self._global(it)[first : first + s.micro_batch_size]
        q = torch.arange(first, first + s.micro_batch_size).unsqueeze(1)
        ids = (q * s.seq_length + torch.arange(s.seq_length)).reshape(-1)
        return seqs[:, :-1], seqs[:, 1:], ids
