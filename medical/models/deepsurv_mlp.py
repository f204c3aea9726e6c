"""DeepSurv (Katzman et al., BMC Med. Res. Methodol. 18:24, 2018): a feed-forward network whose output is
the log hazard ratio, trained with the Cox partial likelihood. The baseline of the survival benchmarks.

All covariates (genes, when the table has them, then clinical) enter one MLP:
Linear -> BatchNorm -> SELU -> Dropout, ``num_layers`` times, then Linear to one risk.

Shapes:
    clinical: (B, C), genes: (B, G) (missing values as 0 with ``gene_mask`` False) -> risk (B,)

>>> deepsurv_mlp(num_genes=4, num_clinical=5)(torch.randn(8, 5), genes=torch.randn(8, 4)).shape
torch.Size([8])
"""
from __future__ import annotations

import torch
from torch import nn

from hub.core.registry import register_model
from hub.errors import DataError


class DeepSurvMLP(nn.Module):
    """DeepSurv: the genes and clinical covariates, concatenated, through an MLP to one log hazard ratio.

    Args:
        num_genes: gene values G (0: none).
        num_clinical: clinical covariates C.
        hidden: width of every hidden layer.
        num_layers: Linear -> BatchNorm -> SELU -> Dropout blocks.
        dropout: dropout after each block.

    Shapes: clinical (B, C), genes (B, G) -> risk (B,)"""

    def __init__(self, num_genes: int, num_clinical: int, hidden: int, num_layers: int, dropout: float):
        super().__init__()
        self.num_genes, self.num_clinical = num_genes, num_clinical
        widths = [num_genes + num_clinical] + [hidden] * num_layers
        self.body = nn.Sequential(*(nn.Sequential(nn.Linear(a, b), nn.BatchNorm1d(b), nn.SELU(), nn.Dropout(dropout))
                                    for a, b in zip(widths[:-1], widths[1:])))
        self.num_features = widths[-1]
        self.head = nn.Linear(self.num_features, 1)

    def forward_features(self, clinical: torch.Tensor, genes: torch.Tensor | None = None,
                         gene_mask: torch.Tensor | None = None) -> torch.Tensor:
        if self.num_genes:
            if genes is None:
                genes = clinical.new_zeros(clinical.shape[0], self.num_genes)  # standardised mean for absent genes
            elif gene_mask is not None:
                genes = genes * gene_mask
            clinical = torch.cat([genes, clinical], dim=-1)  # (B, G + C)
        if clinical.shape[1:] != (self.num_genes + self.num_clinical,):
            raise DataError(f"expected {self.num_genes} genes + {self.num_clinical} clinical features, "
                            f"got {clinical.shape[-1]} values")
        return self.body(clinical)  # (B, hidden)

    def forward_head(self, features: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        return features if pre_logits else self.head(features).squeeze(-1)  # (B,)

    def forward(self, clinical: torch.Tensor, genes: torch.Tensor | None = None,
                gene_mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.forward_head(self.forward_features(clinical, genes, gene_mask))


@register_model(task="survival", classifier=None)
def deepsurv_mlp(num_genes: int = 0, num_clinical: int = 5, hidden: int = 32, num_layers: int = 2,
                 dropout: float = 0.2) -> DeepSurvMLP:
    """DeepSurv-style MLP risk model (the survival baseline)."""
    return DeepSurvMLP(num_genes, num_clinical, hidden, num_layers, dropout)
