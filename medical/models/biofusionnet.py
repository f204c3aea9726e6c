"""BioFusionNet's fusion (Mondol et al., IEEE JBHI 2024; seeds 002 #38): co-dual-cross-attention between two
modality embeddings, clinical data through a feed-forward network, one Cox risk per patient (trained with the weighted
Cox loss, :func:`medical.tasks.weighted_cox_loss`: the recipe's ``data.args.loss: weighted``).

Co-dual-cross-attention, as the paper describes it, in two stages of cross-attention between modalities A and B:

1. co-attention: A's tokens attend to B's and B's to A's (``a1 = A <- B``, ``b1 = B <- A``);
2. dual cross-attention: each co-attended side attends to the other's co-attended tokens (``a2 = a1 <- b1``,
   ``b2 = b1 <- a1``);

each side is then pooled (masked mean over its tokens) and the two are concatenated with the clinical FFN's
embedding, and an MLP gives the risk. Every cross-attention is the shared core's
:class:`~hub.attention.CrossAttention` (pre-norm, residual, with an MLP).

The modalities: the paper fuses patient-level image features (self-supervised tile features through a VAE and
self-attention) with gene expression. Here the image branch is the one :mod:`medical.models.survival_fusion` has
(a timm backbone over a patient's tiles, SAB and PMA tokens), used when ``image_backbone`` is set: then A = image
tokens, B = gene tokens. Without images (the GSE7390 tag), A = gene tokens and B = clinical tokens (one token per
clinical feature), and the clinical FFN still joins at the end.

Shapes:
    clinical: (B, C); genes: (B, G); gene_mask: (B, G) bool; tiles: (B, N, channels, H, W); tiles_mask: (B, N)
    -> risk (B,); ``forward_features`` -> (B, 3 * dim).

>>> model = biofusionnet(num_genes=6, num_clinical=4, dim=16)
>>> model(torch.randn(3, 4), genes=torch.randn(3, 6)).shape
torch.Size([3])
"""
from __future__ import annotations

import torch
from torch import nn

from hub.attention import CrossAttention, masked_mean
from hub.core.registry import register_model
from hub.errors import DataError
from medical.models.survival_fusion import FusedRisk, GeneTokenizer, TileEncoder


class CoDualCrossAttention(nn.Module):
    """Co-attention then dual cross-attention between two token sets of width ``dim`` (see the module docstring).

    Args:
        dim: token width of both modalities.
        num_heads: attention heads of each of the four cross-attentions.
        dropout: dropout on the attention weights and the MLPs.

    Shapes:
        a: (B, La, dim), b: (B, Lb, dim), a_mask: (B, La), b_mask: (B, Lb) bool (True = present)
        -> (pooled a (B, dim), pooled b (B, dim)), and with ``need_weights`` a dict of the four maps
        ``co_a_to_b`` (B, H, La, Lb), ``co_b_to_a`` (B, H, Lb, La), ``dual_a_to_b``, ``dual_b_to_a``.
    """

    def __init__(self, dim: int, num_heads: int, dropout: float = 0.0):
        super().__init__()
        self.co_a_to_b = CrossAttention(dim, dim, num_heads, dropout=dropout)
        self.co_b_to_a = CrossAttention(dim, dim, num_heads, dropout=dropout)
        self.dual_a_to_b = CrossAttention(dim, dim, num_heads, dropout=dropout)
        self.dual_b_to_a = CrossAttention(dim, dim, num_heads, dropout=dropout)

    def forward(self, a: torch.Tensor, b: torch.Tensor, a_mask: torch.Tensor, b_mask: torch.Tensor,
                need_weights: bool = False):
        weights = {}
        a1, weights["co_a_to_b"] = self.co_a_to_b(a, b, b_mask, need_weights)  # (B, La, dim)
        b1, weights["co_b_to_a"] = self.co_b_to_a(b, a, a_mask, need_weights)  # (B, Lb, dim)
        a2, weights["dual_a_to_b"] = self.dual_a_to_b(a1, b1, b_mask, need_weights)
        b2, weights["dual_b_to_a"] = self.dual_b_to_a(b1, a1, a_mask, need_weights)
        pooled = masked_mean(a2, a_mask), masked_mean(b2, b_mask)  # (B, dim) each
        return (pooled, weights) if need_weights else pooled


class BioFusionNet(FusedRisk):
    """Co-dual-cross-attention fusion of (image, genes) or (genes, clinical tokens), clinical FFN, Cox risk head.

    Args:
        num_genes: gene tokens (at least 1).
        num_clinical: clinical features (tokens when there is no image branch, and the FFN's input).
        dim: token and embedding width.
        num_heads: attention heads.
        image_backbone: timm architecture for a patient's tiles (None: no image branch).
        image_channels: tile channels.
        num_image_tokens: PMA seeds, the patient-level image tokens.
        dropout: dropout in the attention blocks, the clinical FFN and the head.
    """

    def __init__(self, num_genes: int, num_clinical: int, dim: int = 32, num_heads: int = 4,
                 image_backbone: str | None = None, image_channels: int = 3, num_image_tokens: int = 4,
                 dropout: float = 0.1):
        super().__init__()
        if num_genes < 1 or num_clinical < 1:
            raise DataError(f"biofusionnet needs genes and clinical features, got num_genes={num_genes}, "
                            f"num_clinical={num_clinical}; for a clinical-only table use survival_fusion or "
                            "deepsurv_mlp")
        self.num_genes, self.num_clinical, self.dim, self.image_backbone = num_genes, num_clinical, dim, image_backbone
        self.genes = GeneTokenizer(num_genes, dim)
        self.image = TileEncoder(image_backbone, image_channels, dim, num_heads, num_image_tokens) \
            if image_backbone else None
        self.clinical_tokens = None if self.image is not None else GeneTokenizer(num_clinical, dim)
        self.fusion = CoDualCrossAttention(dim, num_heads, dropout)
        self.clinical = nn.Sequential(nn.Linear(num_clinical, dim), nn.ReLU(), nn.Dropout(dropout),
                                      nn.Linear(dim, dim), nn.ReLU())
        self.num_features = 3 * dim
        self.head = nn.Sequential(nn.Dropout(dropout), nn.Linear(self.num_features, dim), nn.ReLU(),
                                  nn.Dropout(dropout), nn.Linear(dim, 1))

    def _modalities(self, clinical, genes, gene_mask, tiles, tiles_mask):
        """The two token sets the fusion reads, and their masks."""
        if genes is None:
            raise DataError(f"biofusionnet needs genes of shape (B, {self.num_genes}); none were given")
        if genes.shape[1:] != (self.num_genes,):
            raise DataError(f"expected genes of shape (B, {self.num_genes}), got {tuple(genes.shape)}")
        gene_mask = torch.ones_like(genes, dtype=torch.bool) if gene_mask is None else gene_mask
        gene_tokens = self.genes(genes)  # (B, G, dim)
        if self.image is None:
            if tiles is not None:
                raise DataError("this model has no image branch (image_backbone=None) but tiles were given")
            clinical_mask = torch.ones_like(clinical, dtype=torch.bool)
            return gene_tokens, self.clinical_tokens(clinical), gene_mask, clinical_mask  # (B, C, dim) tokens
        if tiles is None:
            raise DataError(f"this model fuses images ({self.image_backbone}) with genes; give tiles (B, N, C, H, W)")
        tiles_mask = torch.ones(tiles.shape[:2], dtype=torch.bool, device=tiles.device) \
            if tiles_mask is None else tiles_mask
        image_tokens = self.image(tiles, tiles_mask)  # (B, k, dim)
        image_mask = tiles_mask.any(-1, keepdim=True).expand(-1, image_tokens.shape[1])  # (B, k)
        return image_tokens, gene_tokens, image_mask, gene_mask

    def forward_features(self, clinical: torch.Tensor, genes: torch.Tensor | None = None,
                         gene_mask: torch.Tensor | None = None, tiles: torch.Tensor | None = None,
                         tiles_mask: torch.Tensor | None = None, need_weights: bool = False):
        """Fused features ``(B, 3 * dim)``: [pooled A, pooled B, clinical FFN]; with ``need_weights`` also the
        co-dual-cross-attention maps (:class:`CoDualCrossAttention`)."""
        if clinical.shape[1:] != (self.num_clinical,):
            raise DataError(f"expected clinical of shape (B, {self.num_clinical}), got {tuple(clinical.shape)}")
        a, b, a_mask, b_mask = self._modalities(clinical, genes, gene_mask, tiles, tiles_mask)
        fused = self.fusion(a, b, a_mask, b_mask, need_weights)
        (pooled_a, pooled_b), weights = fused if need_weights else (fused, None)
        features = torch.cat([pooled_a, pooled_b, self.clinical(clinical)], dim=-1)  # (B, 3 dim)
        return (features, weights) if need_weights else features


    def attention_maps(self, clinical: torch.Tensor, genes: torch.Tensor | None = None, **inputs):
        """The four maps of the co-dual-cross-attention (see :class:`CoDualCrossAttention`)."""
        return self.forward_features(clinical, genes, need_weights=True, **inputs)[1]


@register_model(task="survival", classifier=None)
def biofusionnet(num_genes: int = 4, num_clinical: int = 5, dim: int = 32, num_heads: int = 4,
                 image_backbone: str | None = None, image_channels: int = 3, num_image_tokens: int = 4,
                 dropout: float = 0.1) -> BioFusionNet:
    """BioFusionNet's fusion: co-dual-cross-attention between (image, genes) or (genes, clinical tokens), a clinical
    FFN, one Cox risk per patient (train with the weighted Cox loss)."""
    return BioFusionNet(num_genes, num_clinical, dim, num_heads, image_backbone, image_channels, num_image_tokens,
                        dropout)
