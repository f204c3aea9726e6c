"""Learnable memory tokens (Sandler et al., CVPR 2022, "Fine-tuning Image Transformers using Learnable Memory"; seed
000 #118): a frozen transformer learns a new task through a few learnable tokens per layer and a new class token
with its head, while the source task's outputs stay exactly as they were.

Sandler et al. concatenate each layer's memory tokens to its input and mask the attention so that the source tokens
never attend to the memory or to the new class token. Masked out, the source tokens' path is the unchanged network;
so here it *is* the unchanged network: :meth:`MemoryTokens.forward_both` runs the frozen model as it is (its logits
are the source task's, bit for bit) and records every block's input tokens, then carries the new class token alone
through the same blocks, its query attending to ``[that block's source tokens, the block's memory tokens, itself]``.
The cost is one forward of the source model plus one query a block. timm's ``Attention`` takes an additive mask but
computes every row, which would make the source rows differ from the unmasked forward by rounding; hence the single
query, written here with the block's own projections and norms.

Works for transformers of timm ``Block`` s (``norm1``, ``attn`` with ``qkv``, ``q_norm``, ``k_norm``, ``norm`` and
``proj``, ``ls1``, ``norm2``, ``mlp``, ``ls2``) under ``model.blocks`` with a final ``model.norm``: timm's ViT (CCT
and the hub's ViTs) and the hub's AST.

Shapes:
    x: the source model's input -> new-task logits (B, num_classes); :meth:`forward_both` ->
    (source logits as the model gives them, new-task logits (B, num_classes)).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from hub.errors import HubError


class MemoryTokens(nn.Module):
    """A frozen transformer ``model`` extended with ``tokens_per_layer`` memory tokens per block, a new class token
    and a linear head for ``num_classes`` classes. Only those are trained.

    Args:
        model: the source transformer (frozen here: its parameters stop requiring gradients).
        num_classes: classes of the new task.
        tokens_per_layer: memory tokens per block (Sandler et al.: 1 to 20; 5 in their CIFAR-100 row).
    """

    def __init__(self, model: nn.Module, num_classes: int, tokens_per_layer: int = 5):
        super().__init__()
        if not fits_memory_tokens(model):
            raise HubError(f"memory tokens need a transformer of timm Blocks under .blocks with a final .norm; "
                           f"{type(model).__name__} is not one")
        if tokens_per_layer < 1:
            raise HubError(f"tokens_per_layer must be >= 1, got {tokens_per_layer}")
        self.model = model.requires_grad_(False)
        blocks = list(model.blocks)
        dim = blocks[0].norm1.normalized_shape[0]
        self.num_features, self.tokens_per_layer = dim, tokens_per_layer
        self.memory = nn.Parameter(torch.zeros(len(blocks), tokens_per_layer, dim))
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.head = nn.Linear(dim, num_classes)
        nn.init.trunc_normal_(self.memory, std=0.02)
        nn.init.trunc_normal_(self.cls_token, std=0.02)

    def train(self, mode: bool = True):
        super().train(mode)
        self.model.eval()  # frozen: its dropout and norms behave as at the source task's inference
        return self

    def forward_both(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The source model's output for ``x``, untouched, and the new task's logits (B, num_classes)."""
        inputs: list[torch.Tensor] = []
        hooks = [block.register_forward_pre_hook(lambda m, args: inputs.append(args[0]))
                 for block in self.model.blocks]
        try:
            source = self.model(x)
        finally:
            for hook in hooks:
                hook.remove()
        token = self.cls_token.expand(inputs[0].shape[0], -1, -1)  # (B, 1, D)
        for block, tokens, memory in zip(self.model.blocks, inputs, self.memory):
            context = torch.cat([tokens, memory.expand(tokens.shape[0], -1, -1), token], dim=1)  # (B, N + m + 1, D)
            token = token + block.drop_path1(block.ls1(_single_query_attention(block.attn, block.norm1(context))))
            token = token + block.drop_path2(block.ls2(block.mlp(block.norm2(token))))
        return source, self.head(self.model.norm(token)[:, 0])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_both(x)[1]

    def extra_repr(self) -> str:
        return f"tokens_per_layer={self.tokens_per_layer}, blocks={len(self.memory)}"


def fits_memory_tokens(model: nn.Module) -> bool:
    """Whether :class:`MemoryTokens` can extend ``model``: timm ``Block`` s under ``model.blocks``, a final
    ``model.norm``."""
    blocks = list(getattr(model, "blocks", []))
    return bool(blocks) and hasattr(model, "norm") and all(_is_timm_block(b) for b in blocks)


def _is_timm_block(block: nn.Module) -> bool:
    attn = getattr(block, "attn", None)
    return all(hasattr(block, n) for n in ("norm1", "ls1", "norm2", "mlp", "ls2")) and all(
        hasattr(attn, n) for n in ("qkv", "q_norm", "k_norm", "proj", "num_heads", "head_dim"))


def _single_query_attention(attn: nn.Module, context: torch.Tensor) -> torch.Tensor:
    """timm ``Attention``'s output for the last token of ``context`` alone, every token a key and value.
    Shapes: (B, L, D) -> (B, 1, D)."""
    if getattr(attn, "gate", None) is not None:
        raise HubError("memory tokens do not support gated attention")
    batch, length, _ = context.shape
    qkv = attn.qkv(context).reshape(batch, length, 3, attn.num_heads, attn.head_dim).permute(2, 0, 3, 1, 4)
    q, k, v = qkv.unbind(0)  # (B, H, L, Dh) each
    out = F.scaled_dot_product_attention(attn.q_norm(q[:, :, -1:]), attn.k_norm(k), v)  # (B, H, 1, Dh)
    return attn.proj_drop(attn.proj(attn.norm(out.transpose(1, 2).reshape(batch, 1, -1))))
