"""The "PLR" numerical embedding of Gorishniy et al., *On Embeddings for Numerical Features in Tabular Deep
Learning* (NeurIPS 2022), used by TabR, the TabTransformer's numeric path and the survival fusion model.

Per feature ``[cos(2 pi c x), sin(2 pi c x)]`` with learned frequencies ``c`` (initialised from N(0, sigma)
truncated at 3 sigma), then one linear layer shared by the features and a ReLU ("PLR (lite)");
``lite=False`` gives each feature its own linear layer (the paper's full PLR).

Shapes:
    x_num (B, F) -> (B, F, dim)

>>> PeriodicEmbeddings(3, 8)(torch.randn(2, 3)).shape
torch.Size([2, 3, 8])
"""
from __future__ import annotations

import math

import torch
from torch import nn

from hub.errors import DataError


class PeriodicEmbeddings(nn.Module):
    """``num_features`` numeric features -> one ``dim``-vector each, from ``num_frequencies`` learned frequencies.

    Args:
        num_features: numeric features F.
        dim: embedding width of each feature.
        num_frequencies: learned frequencies per feature (default 16); each gives a cosine and a sine.
        sigma: std of the frequencies' initialisation, N(0, sigma) truncated at 3 sigma (default 0.1).
        lite: one linear layer shared by the features (True, default: PLR-lite) or one per feature (full PLR).

    Shapes: x_num (B, F) -> (B, F, dim)"""

    def __init__(self, num_features: int, dim: int, num_frequencies: int = 16, sigma: float = 0.1,
                 lite: bool = True):
        super().__init__()
        self.num_features, self.dim, self.sigma, self.lite = num_features, dim, sigma, lite
        self.frequencies = nn.Parameter(torch.empty(num_features, num_frequencies))
        if lite:  # one linear layer shared by the features
            self.linear = nn.Linear(2 * num_frequencies, dim)
        else:  # one linear layer per feature (the paper's full PLR)
            self.weight = nn.Parameter(torch.empty(num_features, 2 * num_frequencies, dim))
            self.bias = nn.Parameter(torch.empty(num_features, dim))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.trunc_normal_(self.frequencies, 0.0, self.sigma, -3 * self.sigma, 3 * self.sigma)
        if self.lite:
            self.linear.reset_parameters()
        else:  # nn.Linear's default initialisation, per feature
            bound = 1 / math.sqrt(self.weight.shape[1])
            nn.init.uniform_(self.weight, -bound, bound)
            nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x_num: torch.Tensor) -> torch.Tensor:
        if x_num.dim() != 2 or x_num.shape[-1] != self.num_features:
            raise DataError(f"PeriodicEmbeddings expected numerics of shape (batch, {self.num_features}), "
                            f"got {tuple(x_num.shape)}")
        angles = 2 * math.pi * self.frequencies * x_num[..., None]  # (B, F, K)
        periodic = torch.cat([angles.cos(), angles.sin()], -1)  # (B, F, 2K)
        if self.lite:
            return torch.relu(self.linear(periodic))  # (B, F, dim)
        return torch.relu(torch.einsum("bfk,fkd->bfd", periodic, self.weight) + self.bias)  # (B, F, dim)

    def extra_repr(self) -> str:
        return f"num_features={self.num_features}, dim={self.dim}, sigma={self.sigma}, lite={self.lite}"
