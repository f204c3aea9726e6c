"""Set Transformer (Lee et al., "Set Transformer: A Framework for Attention-based Permutation-Invariant
Neural Networks", ICML 2019).

``MAB(X, Y) = LN(H + rFF(H))`` with ``H = LN(X + Multihead(X, Y, Y))``; ``SAB(X) = MAB(X, X)``
(equivariant, O(n²)); ``ISAB(X) = MAB(X, MAB(I, X))`` with m learned inducing points (O(n·m));
``PMA_k(Z) = MAB(S, rFF(Z))`` with k learned seeds (invariant pooling). The encoder-decoder model is
``Decoder(Encoder(X))`` with ``Encoder = SAB/ISAB x L`` and ``Decoder = rFF(SAB(PMA_k(Z)))``.

Sets of different sizes share a batch through a presence mask ``(B, N)`` bool (``True`` = present):
padded elements are never attended to and their outputs are zero; an empty set stays finite.
"""
from __future__ import annotations

import torch
from torch import nn

from hub.attention.functional import MultiHeadAttention


def _zero_padding(x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    return x if mask is None else x.masked_fill(~mask[..., None], 0.0)


class MAB(nn.Module):
    """Multihead attention block: the rows of ``x`` attend to the rows of ``y``.

    Args:
        dim_q: width of ``x`` (projected to ``dim`` first when different, as the authors' code does).
        dim_kv: width of ``y``.
        dim: output width.
        num_heads: attention heads.
        layer_norm: the two LayerNorms of the paper (the authors' code makes them optional).

    Shapes:
        x: (B, Nq, dim_q), y: (B, Nk, dim_kv), key_mask: (B, Nk) bool -> (B, Nq, dim).

    >>> MAB(3, 5, 16, num_heads=4)(torch.randn(2, 7, 3), torch.randn(2, 9, 5)).shape
    torch.Size([2, 7, 16])
    """

    def __init__(self, dim_q: int, dim_kv: int, dim: int, num_heads: int, layer_norm: bool = True):
        super().__init__()
        self.dim_q, self.dim_kv, self.dim, self.num_heads, self.layer_norm = dim_q, dim_kv, dim, num_heads, layer_norm
        self.query_proj = nn.Linear(dim_q, dim) if dim_q != dim else nn.Identity()
        self.attn = MultiHeadAttention(dim, num_heads, dim_kv=dim_kv)
        self.rff = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, dim))
        self.norm1 = nn.LayerNorm(dim) if layer_norm else nn.Identity()
        self.norm2 = nn.LayerNorm(dim) if layer_norm else nn.Identity()
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for module in (self.query_proj, self.attn, self.norm1, self.norm2, *self.rff):
            if hasattr(module, "reset_parameters"):
                module.reset_parameters()

    def forward(self, x: torch.Tensor, y: torch.Tensor, key_mask: torch.Tensor | None = None,
                need_weights: bool = False):
        x = self.query_proj(x)  # (B, Nq, dim)
        attended, weights = self.attn(x, y, key_mask, need_weights)  # (B, Nq, dim), (B, H, Nq, Nk)
        h = self.norm1(x + attended)
        out = self.norm2(h + self.rff(h))
        return (out, weights) if need_weights else out

    def extra_repr(self) -> str:
        return f"dim_q={self.dim_q}, dim_kv={self.dim_kv}, dim={self.dim}, num_heads={self.num_heads}, " \
               f"layer_norm={self.layer_norm}"


class SAB(nn.Module):
    """Set attention block ``MAB(X, X)``: permutation equivariant, O(n²) time and memory.

    Args:
        dim_in: width of the set elements.
        dim: output width.
        num_heads: attention heads (must divide ``dim``).
        layer_norm: the MAB's two LayerNorms (default True).

    Shapes:
        x: (B, N, dim_in), mask: (B, N) bool, True = present -> (B, N, dim) (padded rows zero).

    >>> SAB(2, 16, num_heads=4)(torch.randn(3, 10, 2)).shape
    torch.Size([3, 10, 16])
    """

    def __init__(self, dim_in: int, dim: int, num_heads: int, layer_norm: bool = True):
        super().__init__()
        self.mab = MAB(dim_in, dim_in, dim, num_heads, layer_norm)

    def reset_parameters(self) -> None:
        self.mab.reset_parameters()

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        return _zero_padding(self.mab(x, x, mask), mask)


class ISAB(nn.Module):
    """Induced set attention block: ``H = MAB(I, X)`` with m inducing points, then ``MAB(X, H)``.

    Permutation equivariant, O(n·m) time and memory.

    Args:
        dim_in: width of the set elements.
        dim: output width (and width of the inducing points).
        num_heads: attention heads (must divide ``dim``).
        num_inds: m, the learned inducing points.
        layer_norm: the LayerNorms of both MABs (default True).

    Shapes:
        x: (B, N, dim_in), mask: (B, N) bool -> (B, N, dim) (padded rows zero).

    >>> ISAB(2, 16, num_heads=4, num_inds=8)(torch.randn(3, 100, 2)).shape
    torch.Size([3, 100, 16])
    """

    def __init__(self, dim_in: int, dim: int, num_heads: int, num_inds: int, layer_norm: bool = True):
        super().__init__()
        self.num_inds = num_inds
        self.inducing = nn.Parameter(torch.empty(1, num_inds, dim))  # (1, m, dim)
        self.mab_induce = MAB(dim, dim_in, dim, num_heads, layer_norm)
        self.mab_out = MAB(dim_in, dim, dim, num_heads, layer_norm)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.xavier_uniform_(self.inducing)
        self.mab_induce.reset_parameters()
        self.mab_out.reset_parameters()

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        induced = self.mab_induce(self.inducing.expand(x.shape[0], -1, -1), x, mask)  # (B, m, dim)
        return _zero_padding(self.mab_out(x, induced), mask)

    def extra_repr(self) -> str:
        return f"num_inds={self.num_inds}"


class PMA(nn.Module):
    """Pooling by multihead attention: k learned seeds attend to ``rFF(Z)``; permutation invariant.

    Args:
        dim: width of the set elements and of the pooled outputs.
        num_seeds: k, the learned seed vectors (outputs per set).
        num_heads: attention heads (must divide ``dim``).
        layer_norm: the MAB's two LayerNorms (default True).

    Shapes:
        z: (B, N, dim), mask: (B, N) bool -> (B, num_seeds, dim); an empty set pools to finite values.

    >>> PMA(16, num_seeds=4, num_heads=4)(torch.randn(3, 10, 16)).shape
    torch.Size([3, 4, 16])
    """

    def __init__(self, dim: int, num_seeds: int, num_heads: int, layer_norm: bool = True):
        super().__init__()
        self.num_seeds = num_seeds
        self.seeds = nn.Parameter(torch.empty(1, num_seeds, dim))  # (1, k, dim)
        self.rff = nn.Sequential(nn.Linear(dim, dim), nn.ReLU())
        self.mab = MAB(dim, dim, dim, num_heads, layer_norm)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.xavier_uniform_(self.seeds)
        self.rff[0].reset_parameters()
        self.mab.reset_parameters()

    def forward(self, z: torch.Tensor, mask: torch.Tensor | None = None, need_weights: bool = False):
        return self.mab(self.seeds.expand(z.shape[0], -1, -1), self.rff(z), mask, need_weights)

    def extra_repr(self) -> str:
        return f"num_seeds={self.num_seeds}"


class SetTransformer(nn.Module):
    """The encoder-decoder Set Transformer: ``rFF(SAB^d(PMA_k(Encoder(X))))``.

    Args:
        dim_input: width of the set elements.
        num_outputs: k, the PMA seeds (outputs per set).
        dim_output: width of each output.
        dim_hidden: model width.
        num_heads: attention heads.
        num_inds: inducing points of ISAB encoder blocks; 0 uses SAB blocks.
        num_encoder_layers: SAB/ISAB blocks in the encoder.
        num_decoder_layers: SAB blocks over the k pooled vectors.
        layer_norm: LayerNorms inside every MAB.

    Shapes:
        x: (B, N, dim_input), mask: (B, N) bool, True = present -> (B, num_outputs, dim_output).

    >>> model = SetTransformer(2, num_outputs=4, dim_output=5, dim_hidden=32, num_inds=8)
    >>> model(torch.randn(3, 50, 2), torch.ones(3, 50, dtype=torch.bool)).shape
    torch.Size([3, 4, 5])
    """

    def __init__(self, dim_input: int, num_outputs: int, dim_output: int, dim_hidden: int = 128, num_heads: int = 4,
                 num_inds: int = 0, num_encoder_layers: int = 2, num_decoder_layers: int = 1, layer_norm: bool = True):
        super().__init__()
        self.dim_input, self.num_outputs, self.dim_output = dim_input, num_outputs, dim_output
        self.num_features = dim_hidden
        widths = [dim_input] + [dim_hidden] * num_encoder_layers
        self.encoder = nn.ModuleList(
            ISAB(w, dim_hidden, num_heads, num_inds, layer_norm) if num_inds
            else SAB(w, dim_hidden, num_heads, layer_norm)
            for w in widths[:-1])
        self.pool = PMA(dim_hidden, num_outputs, num_heads, layer_norm)
        self.decoder = nn.ModuleList(SAB(dim_hidden, dim_hidden, num_heads, layer_norm)
                                     for _ in range(num_decoder_layers))
        self.head = nn.Linear(dim_hidden, dim_output)

    def reset_parameters(self) -> None:
        for block in (*self.encoder, self.pool, *self.decoder, self.head):
            block.reset_parameters()

    def forward_features(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """The encoded elements ``(B, N, dim_hidden)``."""
        for block in self.encoder:
            x = block(x, mask)
        return x

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        pooled = self.pool(self.forward_features(x, mask), mask)  # (B, k, dim_hidden)
        for block in self.decoder:
            pooled = block(pooled)
        return self.head(pooled)  # (B, k, dim_output)

    def extra_repr(self) -> str:
        return f"dim_input={self.dim_input}, num_outputs={self.num_outputs}, dim_output={self.dim_output}"
