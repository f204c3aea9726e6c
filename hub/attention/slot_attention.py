"""Slot Attention (Locatello et al., "Object-Centric Learning with Slot Attention", NeurIPS 2020).

K slots drawn from a learned Gaussian compete for the N inputs: for T iterations the attention
``softmax_over_slots(k(x)·q(slots)/√D)`` is renormalised over the inputs (a weighted mean, with
``eps``), the slots are updated by a GRU cell and refined by a residual MLP. The softmax runs over the
queries (slots), not the keys, so ``scaled_dot_product_attention`` does not apply; the scores are
computed explicitly. ``implicit_grad=True`` detaches the slots before the last iteration (Chang et
al., 2022, "Object Representations as Fixed Points"): the gradient flows through one iteration
only, which stabilises training; the slot Gaussian then gets no gradient (a fixed point does not
depend on where the iteration starts).
"""
from __future__ import annotations

import math

import torch
from torch import nn

from hub.attention.functional import key_padding_mask


class SlotAttention(nn.Module):
    """Slot Attention module.

    Args:
        dim_input: width of the input features.
        num_slots: K, slots per sample (``forward`` may ask for another number).
        dim_slot: slot width D.
        num_iterations: T.
        dim_hidden: hidden width of the residual MLP.
        eps: added to the attention before the renormalisation over inputs.
        implicit_grad: detach the slots before the last iteration.

    Shapes:
        inputs: (B, N, dim_input), mask: (B, N) bool, True = present
        -> slots (B, K, dim_slot), attention (B, K, N) (softmax over slots: per-slot masks summing to
        1 over the slots at every present input; zero at padded inputs).

    >>> slots, attn = SlotAttention(32, num_slots=4)(torch.randn(2, 100, 32))
    >>> slots.shape, attn.shape
    (torch.Size([2, 4, 64]), torch.Size([2, 4, 100]))
    """

    def __init__(self, dim_input: int, num_slots: int, dim_slot: int = 64, num_iterations: int = 3,
                 dim_hidden: int = 128, eps: float = 1e-8, implicit_grad: bool = False):
        super().__init__()
        self.dim_input, self.num_slots, self.dim_slot = dim_input, num_slots, dim_slot
        self.num_iterations, self.eps, self.implicit_grad = num_iterations, eps, implicit_grad
        self.slots_mu = nn.Parameter(torch.empty(1, 1, dim_slot))
        self.slots_log_sigma = nn.Parameter(torch.empty(1, 1, dim_slot))
        self.norm_inputs = nn.LayerNorm(dim_input)
        self.norm_slots = nn.LayerNorm(dim_slot)
        self.norm_mlp = nn.LayerNorm(dim_slot)
        self.q_proj = nn.Linear(dim_slot, dim_slot, bias=False)
        self.k_proj = nn.Linear(dim_input, dim_slot, bias=False)
        self.v_proj = nn.Linear(dim_input, dim_slot, bias=False)
        self.gru = nn.GRUCell(dim_slot, dim_slot)
        self.mlp = nn.Sequential(nn.Linear(dim_slot, dim_hidden), nn.ReLU(), nn.Linear(dim_hidden, dim_slot))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.xavier_uniform_(self.slots_mu)
        nn.init.xavier_uniform_(self.slots_log_sigma)
        for module in (self.norm_inputs, self.norm_slots, self.norm_mlp, self.q_proj, self.k_proj, self.v_proj,
                       self.gru, self.mlp[0], self.mlp[2]):
            module.reset_parameters()

    def initial_slots(self, batch: int, num_slots: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """``mu + sigma * noise`` of shape (B, K, D); pass a seeded ``generator`` to fix the noise."""
        noise = torch.randn(batch, num_slots, self.dim_slot, generator=generator, device=self.slots_mu.device)
        return self.slots_mu + self.slots_log_sigma.exp() * noise.to(self.slots_mu.dtype)

    def iterate(self, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None):
        """One round: attention over slots, weighted mean, GRU, residual MLP."""
        batch, num_slots, _ = slots.shape
        q = self.q_proj(self.norm_slots(slots))  # (B, K, D)
        logits = q @ k.transpose(1, 2) / math.sqrt(self.dim_slot)  # (B, K, N)
        attn = logits.softmax(dim=1)  # softmax over the slots: the competition
        weights = attn + self.eps
        if mask is not None:
            attn = attn * mask
            weights = weights * mask
        weights = weights / weights.sum(-1, keepdim=True).clamp_min(self.eps)  # weighted mean over the inputs
        updates = weights @ v  # (B, K, D)
        slots = self.gru(updates.reshape(-1, self.dim_slot), slots.reshape(-1, self.dim_slot))  # (B * K, D)
        slots = slots.view(batch, num_slots, self.dim_slot)  # (B * K, D) -> (B, K, D)
        return slots + self.mlp(self.norm_mlp(slots)), attn

    def forward(self, inputs: torch.Tensor, mask: torch.Tensor | None = None, num_slots: int | None = None,
                generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        batch, length, _ = inputs.shape
        mask = key_padding_mask(mask, batch, length, "mask")
        mask = None if mask is None else mask[:, 0]  # (B, 1, 1, N) -> (B, 1, N)
        inputs = self.norm_inputs(inputs)
        k, v = self.k_proj(inputs), self.v_proj(inputs)  # (B, N, D) each
        slots = self.initial_slots(batch, num_slots or self.num_slots, generator)
        attn = inputs.new_zeros(batch, slots.shape[1], length)
        for iteration in range(self.num_iterations):
            if self.implicit_grad and iteration == self.num_iterations - 1:
                slots = slots.detach()
            slots, attn = self.iterate(slots, k, v, mask)
        return slots, attn

    def extra_repr(self) -> str:
        return (f"dim_input={self.dim_input}, num_slots={self.num_slots}, dim_slot={self.dim_slot}, "
                f"num_iterations={self.num_iterations}, implicit_grad={self.implicit_grad}")
