"""Megatron's DDP gradient buffers: each parameter's gradient is added into a persistent fp32
`main_grad`, a view of one contiguous buffer, by a hook on the parameter's AccumulateGrad node;
the buffer is zeroed once per step and is what the grad all-reduce, the clip and the optimizer read.

That hook is why a Megatron trace shows `aten::add_` under
`autograd::engine::evaluate_function: torch::autograd::AccumulateGrad` (the seed's largest
leftover: the grouped expert weights, whose grouped GEMM has no fused wgrad accumulation), and why
zeroing the buffer is a per-step cost that a larger global batch amortises.
"""

from __future__ import annotations

import torch


def _add_to_main_grad(param: torch.Tensor) -> None:
    main_grad: torch.Tensor = param.main_grad  # type: ignore[attr-defined]
    if param.grad is None:  # a fused wgrad accumulation (MegaMoE) already wrote into main_grad
        return
    main_grad.add_(param.grad)
    param.grad = None


class GradBuffer:
    """One contiguous fp32 buffer holding `main_grad` for `params`, in their order."""

    def __init__(self, params: list[torch.nn.Parameter]) -> None:
        self.params = [p for p in params if p.requires_grad]
        self.flat = torch.zeros(sum(p.numel() for p in self.params))
        offset = 0
        for p in self.params:
            p.main_grad = self.flat[offset : offset + p.numel()].view_as(p)  # type: ignore[attr-defined]
            offset += p.numel()
            p.register_post_accumulate_grad_hook(_add_to_main_grad)

    def expose(self) -> None:
        """Point each `.grad` at its `main_grad` for the step's reduce, clip and optimizer."""
        for p in self.params:
            p.grad = p.main_grad  # type: ignore[attr-defined]

    def zero(self) -> None:
        """Megatron's zero_grad_buffer: the next step accumulates from zero."""
        for p in self.params:
            p.grad = None
        self.flat.zero_()
