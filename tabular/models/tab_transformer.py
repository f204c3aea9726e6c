"""TabTransformer (Huang et al., *TabTransformer: Tabular Data Modeling Using Contextual Embeddings*, 2020).

Each categorical column's value becomes an embedding (a category part of width ``dim - dim // 8`` and a
column part of width ``dim // 8`` shared by the column's categories, as in the paper); a stack of
Transformer blocks (post-norm, the hub core's :class:`~hub.attention.TransformerBlock`) lets the columns
attend to each other; the contextual embeddings, flattened, are concatenated with the layer-normed numeric
features and an MLP (hidden widths 4l and 2l for an input of width l) predicts. ``column_attention`` returns
the attention between columns. :class:`ReplacedTokenDetection` and :func:`pretrain` are the paper's
unsupervised pre-training (replaced token detection) of the embeddings and Transformer on unlabelled rows; a
recipe runs it with ``data.args.pretrain_epochs`` (and keeps only ``label_fraction`` of the labels, the paper's
semi-supervised setting: ``recipes/tabular/tab_transformer_adult_semi.yaml``).

``numeric_embedding`` departs from the paper on one point when it is not ``"layernorm"``: each numeric feature
goes through the periodic embedding of Gorishniy et al. (NeurIPS 2022, :class:`~hub.layers.PeriodicEmbeddings`)
instead of the row-wise LayerNorm, which removes each row's mean and spread over its numeric features:
``"periodic"`` is PLR-lite (one linear layer shared by the features, as TabR uses), ``"periodic_full"`` the full
PLR (one linear layer per feature). The categorical path, the Transformer and the MLP are the paper's. On Adult,
seed 0's validation AUROC was 0.8972 with LayerNorm (the earlier recipe), 0.9164 with PLR-lite and 0.9179 with
full PLR at frequency sigma 1.0, 0.9197 at sigma 2.0 (the recipe's; its other settings in all three); the steps
are in ``recipes/tabular/tab_transformer_adult.yaml``.

Shapes:
    x_num (B, F), x_cat (B, C) int64 -> logits (B, num_classes); column_attention -> (B, depth, heads, C, C)

>>> tab_transformer(num_numeric=2, cat_cardinalities=[5, 3], num_classes=2)(torch.randn(4, 2),
...                 torch.zeros(4, 2, dtype=torch.long)).shape
torch.Size([4, 2])
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from hub.attention import TransformerBlock
from hub.core.registry import register_model
from hub.layers.periodic_embeddings import PeriodicEmbeddings
from tabular.models.layers import CategoricalEmbeddings, LinearHeadModel, check_numeric


class TabTransformer(LinearHeadModel):
    """TabTransformer: the categorical columns through a Transformer, then an MLP with the numerics (see the module).

    Args:
        num_numeric: number of numeric features F.
        cat_cardinalities: number of codes of each categorical column (its length is C).
        num_classes: outputs of the head (1 for regression).
        dim: width of each column's embedding (a category part of ``dim - dim // 8`` and a column part of ``dim // 8``).
        depth: number of Transformer blocks.
        num_heads: attention heads per block.
        dropout: dropout inside the Transformer blocks.
        mlp_dropout: dropout after each of the MLP's two hidden layers.
        numeric_embedding: ``"layernorm"`` (the paper's LayerNorm over a row's numerics, default), ``"periodic"``
            (PLR-lite per feature) or ``"periodic_full"`` (full PLR).
        num_embed_dim: width of each numeric feature's periodic embedding (unused with ``"layernorm"``).
        frequency_sigma: standard deviation of the periodic embedding's initial frequencies (unused with
            ``"layernorm"``).

    Shapes: x_num (B, F), x_cat (B, C) int64 -> logits (B, num_classes)"""

    def __init__(self, num_numeric: int, cat_cardinalities: list[int], num_classes: int, dim: int, depth: int,
                 num_heads: int, dropout: float, mlp_dropout: float, numeric_embedding: str = "layernorm",
                 num_embed_dim: int = 8, frequency_sigma: float = 0.1):
        super().__init__()
        if numeric_embedding not in ("layernorm", "periodic", "periodic_full"):
            raise ValueError("numeric_embedding must be 'layernorm', 'periodic' or 'periodic_full', "
                             f"got {numeric_embedding!r}")
        self.num_numeric, self.num_columns = num_numeric, len(cat_cardinalities)
        column_dim = dim // 8
        self.cat_embed = CategoricalEmbeddings(cat_cardinalities, dim - column_dim)
        self.column_embed = nn.Parameter(torch.randn(self.num_columns, column_dim) * 0.02)
        self.blocks = nn.ModuleList(TransformerBlock(dim, num_heads, dropout) for _ in range(depth))
        if numeric_embedding.startswith("periodic"):  # PLR(-lite) per numeric feature, flattened: (B, F) -> (B, F * e)
            self.num_embed = nn.Sequential(PeriodicEmbeddings(num_numeric, num_embed_dim, sigma=frequency_sigma,
                                                              lite=numeric_embedding == "periodic"),
                                           nn.Flatten(1))
            num_width = num_numeric * num_embed_dim
        else:  # the paper: one LayerNorm over the row's numeric features
            self.num_embed = nn.LayerNorm(num_numeric) if num_numeric else nn.Identity()
            num_width = num_numeric
        width = self.num_columns * dim + num_width
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.ReLU(), nn.Dropout(mlp_dropout),
                                 nn.Linear(4 * width, 2 * width), nn.ReLU(), nn.Dropout(mlp_dropout))
        self.num_features = 2 * width
        self.head = nn.Linear(self.num_features, num_classes)

    def _tokens(self, x_cat: torch.Tensor) -> torch.Tensor:
        values = self.cat_embed(x_cat)  # (B, C, dim - dim // 8)
        column = self.column_embed[None].expand(x_cat.shape[0], -1, -1)  # (C, dim // 8) -> (B, C, dim // 8)
        return torch.cat([values, column], -1)  # (B, C, dim)

    def contextual(self, x_cat: torch.Tensor) -> torch.Tensor:
        """The columns' contextual embeddings (B, C, dim)."""
        x = self._tokens(x_cat)
        for block in self.blocks:
            x = block(x)
        return x

    def forward_features(self, x_num: torch.Tensor, x_cat: torch.Tensor | None = None) -> torch.Tensor:
        check_numeric(x_num, self.num_numeric)
        if x_cat is None:
            x_cat = x_num.new_zeros(x_num.shape[0], 0, dtype=torch.long)
        x = self.contextual(x_cat).flatten(1)  # (B, C, dim) -> (B, C * dim)
        return self.mlp(torch.cat([x, self.num_embed(x_num)], -1))  # (B, C * dim + F') -> (B, 2 width)

    def column_attention(self, x_cat: torch.Tensor) -> torch.Tensor:
        """Attention weights between the categorical columns, per layer and head: (B, depth, H, C, C)."""
        x, maps = self._tokens(x_cat), []
        for block in self.blocks:
            x, weights = block(x, need_weights=True)
            maps.append(weights)
        return torch.stack(maps, 1)


class ReplacedTokenDetection(nn.Module):
    """The paper's pre-training objective (replaced token detection, after ELECTRA): each categorical value is
    replaced, with probability ``replace_prob``, by the same column's value in a random other row; one binary
    classifier per column tells from the contextual embedding whether its value was replaced. The heads live
    here, not in the model, so the pre-trained model keeps its own state dict.

    Shapes: x_cat (B, C) -> loss ()
    """

    def __init__(self, model: TabTransformer, replace_prob: float = 0.3):
        super().__init__()
        self.model, self.replace_prob = model, replace_prob
        dim = model.blocks[0].norm1.normalized_shape[0] if len(model.blocks) else model.cat_embed.dim
        self.weight = nn.Parameter(torch.zeros(model.num_columns, dim))  # one classifier per column
        self.bias = nn.Parameter(torch.zeros(model.num_columns))

    def forward(self, x_cat: torch.Tensor) -> torch.Tensor:
        batch, columns = x_cat.shape
        donors = torch.randint(0, batch, (batch, columns), device=x_cat.device)
        donor_values = x_cat.gather(0, donors)  # (B, C): column j's value in row donors[i, j]
        replaced = (torch.rand(batch, columns, device=x_cat.device) < self.replace_prob) & (donor_values != x_cat)
        x = self.model.contextual(torch.where(replaced, donor_values, x_cat))  # (B, C, dim)
        logits = (x * self.weight).sum(-1) + self.bias  # (B, C)
        return F.binary_cross_entropy_with_logits(logits, replaced.float())


def pretrain(model: TabTransformer, x_cat: torch.Tensor, epochs: int = 10, batch_size: int = 256, lr: float = 1e-3,
             replace_prob: float = 0.3, seed: int = 0) -> list[float]:
    """Pre-train ``model``'s embeddings and Transformer on unlabelled categorical rows (B, C) by replaced token
    detection; returns the mean loss per epoch. Then fine-tune as usual; in a recipe,
    :class:`tabular.data.ReplacedTokenPretraining` calls this before the first epoch when
    ``data.args.pretrain_epochs`` > 0."""
    generator = torch.Generator().manual_seed(seed)
    objective = ReplacedTokenDetection(model, replace_prob).to(x_cat.device).train()
    optimizer = torch.optim.AdamW(objective.parameters(), lr=lr)
    history = []
    for _ in range(epochs):
        order, losses = torch.randperm(len(x_cat), generator=generator), []
        for start in range(0, len(x_cat), batch_size):
            loss = objective(x_cat[order[start:start + batch_size]])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        history.append(sum(losses) / len(losses))
    return history


@register_model(task="tabular")
def tab_transformer(num_numeric: int = 8, cat_cardinalities: list[int] = (4, 4), num_classes: int = 2,
                    dim: int = 32, depth: int = 3, num_heads: int = 4, dropout: float = 0.1,
                    mlp_dropout: float = 0.1, numeric_embedding: str = "layernorm",
                    num_embed_dim: int = 8, frequency_sigma: float = 0.1) -> TabTransformer:
    """TabTransformer: categorical columns through a Transformer, then an MLP with the numerics."""
    return TabTransformer(num_numeric, list(cat_cardinalities), num_classes, dim, depth, num_heads, dropout,
                          mlp_dropout, numeric_embedding, num_embed_dim, frequency_sigma)
