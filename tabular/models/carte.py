"""CARTE (Kim, Grinsztajn and Varoquaux, *CARTE: Pretraining and Transfer for Tabular Learning*, ICML 2024).

A table row is a star graph (:mod:`tabular.row_graph`): one leaf per non-missing cell and a centre node. A leaf's
features join the embedding of its column's name with that of its value, ``leaf = MLP([value ; column])`` (a
number's value embedding is its robust-scaled value times the column name's embedding, as in the paper); the centre
starts as a learned vector plus the mean of the leaves. ``depth`` pre-norm blocks of graph attention on the star
(the hub core's :class:`~hub.attention.MultiHeadAttention` with the star's adjacency as its mask: the centre attends
to itself and every leaf, a leaf to itself and the centre; missing cells have no leaf) and a feed-forward layer
contextualise the cells; the centre's final state is the row's representation, read out by a linear head
(regression or classification). Nothing depends on the number or order of the columns, so one backbone reads
tables of any schema, and permuting a row's cells leaves its prediction unchanged.

Departures from the paper, for CPU sizes: the paper's attention scores node and edge features apart (keys and values
from the leaf times its edge, the column name) and pretrains by contrasting truncated graphs of a knowledge graph
(YAGO); here the column name enters the leaf before the attention, and :func:`pretrain` contrasts two random
subsets of the cells of the same rows of background tables (the hub's other tables, the CARTE tables not under
test), schema-free as the paper's. The paper's bagging of models fitted on several validation splits is the
benchmark's (``benchmarks/carte_tables.py``), not the family's.

Shapes:
    values (B, L, E), columns (B, L, E) or (L, E), mask (B, L) bool -> (B, num_classes)
    cell_attention -> (B, depth, heads, L): the centre's attention to each leaf

>>> model = carte(embed_dim=100, num_classes=1, dim=32, depth=1, num_heads=2)
>>> model(torch.randn(3, 4, 100), torch.randn(4, 100), torch.ones(3, 4, dtype=torch.bool)).shape
torch.Size([3, 1])
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from hub.attention import TransformerBlock
from hub.core.registry import register_model
from hub.errors import DataError


def star_adjacency(num_leaves: int, device=None) -> torch.Tensor:
    """(1, 1, L + 1, L + 1) bool, True = may attend: node 0 (the centre) to every node, a leaf to itself and the
    centre."""
    adjacency = torch.eye(num_leaves + 1, dtype=torch.bool, device=device)
    adjacency[0, :] = True
    adjacency[:, 0] = True
    return adjacency[None, None]


class CARTE(nn.Module):
    """Graph attention over a row's cells, read out at the row's centre node (see the module).

    Args:
        embed_dim: width E of the value and column-name embeddings (100: GloVe 6B 50d and hashed n-grams, or
            the n-grams alone).
        num_classes: classes (1 for regression).
        dim: width of the nodes.
        depth: star-graph attention blocks.
        num_heads: attention heads (must divide ``dim``).
        dropout: on the attention weights, in the feed-forward layers and on the residual branches.

    Shapes: values (B, L, E), columns (B, L, E) or (L, E), mask (B, L) bool -> logits (B, num_classes)"""

    def __init__(self, embed_dim: int, num_classes: int, dim: int, depth: int, num_heads: int, dropout: float):
        super().__init__()
        self.embed_dim, self.num_classes, self.num_features = embed_dim, num_classes, dim
        self.leaf = nn.Sequential(nn.Linear(2 * embed_dim, dim), nn.GELU(), nn.Linear(dim, dim))
        self.centre = nn.Parameter(torch.zeros(dim))
        self.blocks = nn.ModuleList(TransformerBlock(dim, num_heads, dropout, ffn_ratio=2, norm_first=True)
                                    for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.reset_classifier(num_classes)

    def reset_classifier(self, num_classes: int) -> None:
        self.num_classes = num_classes
        self.head = nn.Linear(self.num_features, num_classes)

    def _nodes(self, values: torch.Tensor, columns: torch.Tensor, mask: torch.Tensor):
        """The graph's nodes (B, L + 1, dim), centre first, and their presence (B, L + 1)."""
        if values.ndim != 3 or values.shape[-1] != self.embed_dim or mask.shape != values.shape[:2]:
            raise DataError(f"CARTE expects values (B, L, {self.embed_dim}), columns (L, {self.embed_dim}) or "
                            f"(B, L, {self.embed_dim}) and mask (B, L); got values {tuple(values.shape)}, columns "
                            f"{tuple(columns.shape)}, mask {tuple(mask.shape)}")
        columns = columns.expand_as(values)
        leaves = self.leaf(torch.cat([values, columns], -1))  # (B, L, dim)
        weights = mask[..., None].to(leaves.dtype)
        centre = self.centre + (leaves * weights).sum(1) / weights.sum(1).clamp(min=1)  # (B, dim)
        present = torch.cat([torch.ones_like(mask[:, :1]), mask], 1)  # the centre is always there
        return torch.cat([centre[:, None], leaves], 1), present

    def forward_features(self, values: torch.Tensor, columns: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x, present = self._nodes(values, columns, mask.bool())
        star = star_adjacency(x.shape[1] - 1, x.device)  # (L + 1, L + 1)
        for block in self.blocks:
            x = block(x, present, star)
        return self.norm(x[:, 0])  # the centre node's state (B, dim)

    def forward_head(self, features: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        return features if pre_logits else self.head(features)

    def forward(self, values: torch.Tensor, columns: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(values, columns, mask))

    def cell_attention(self, values: torch.Tensor, columns: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The centre's attention to each leaf (cell), per block and head: (B, depth, heads, L); a missing cell's is
        0 (the rest, to 1, is the centre's attention to itself)."""
        x, present = self._nodes(values, columns, mask.bool())
        found, star = [], star_adjacency(x.shape[1] - 1, x.device)
        for block in self.blocks:
            x, weights = block(x, present, star, need_weights=True)
            found.append(weights[:, :, 0, 1:])  # (B, heads, L)
        return torch.stack(found, 1)


def _cell_dropout(mask: torch.Tensor, keep: float, generator: torch.Generator) -> torch.Tensor:
    """A random subset of each row's present cells (each kept with probability ``keep``), never empty where the row
    had a cell."""
    kept = mask & (torch.rand(mask.shape, generator=generator) < keep)
    empty = ~kept.any(1) & mask.any(1)
    first = mask.float().argmax(1)
    kept[empty, first[empty]] = True
    return kept


def pretrain(model: CARTE, tables: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]], steps: int = 500,
             batch_size: int = 128, lr: float = 5e-4, keep: float = 0.6, temperature: float = 0.1,
             seed: int = 0) -> list[float]:
    """Pretrain ``model``'s backbone on background tables without matching their schemas: each step draws one table
    and ``batch_size`` of its rows, makes two views of each row (random subsets of its cells, each kept with
    probability ``keep``), and pulls the two centre states of a row together against the other rows' (InfoNCE at
    ``temperature``, both directions, through a projector dropped afterwards). The head is not trained. Returns the
    mean loss of every 50 steps.

    Args:
        tables: per table ``(values (N, L, E), columns (L, E), mask (N, L))`` of :mod:`tabular.row_graph`.
        steps: optimiser steps (tables drawn in proportion to the square root of their rows)."""
    generator = torch.Generator().manual_seed(seed)
    dim = model.num_features
    projector = nn.Sequential(nn.Linear(dim, dim), nn.GELU(), nn.Linear(dim, dim))
    backbone = [p for name, p in model.named_parameters() if not name.startswith("head.")]
    optimizer = torch.optim.AdamW(backbone + list(projector.parameters()), lr=lr, weight_decay=1e-4)
    sizes = torch.tensor([len(t[0]) for t in tables], dtype=torch.float).sqrt()
    model.train()
    history, losses = [], []
    for step in range(steps):
        values, columns, mask = tables[int(torch.multinomial(sizes, 1, generator=generator))]
        rows = torch.randperm(len(values), generator=generator)[:batch_size]
        v, m = values[rows], mask[rows]
        z = [F.normalize(projector(model.forward_features(v, columns, _cell_dropout(m, keep, generator))), dim=-1)
             for _ in range(2)]
        logits = z[0] @ z[1].T / temperature  # (B, B): a row's two views on the diagonal
        target = torch.arange(len(v))
        loss = 0.5 * (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if len(losses) == 50 or step == steps - 1:
            history.append(sum(losses) / len(losses))
            losses = []
    return history


@register_model(task="table-graph")
def carte(embed_dim: int = 100, num_classes: int = 1, dim: int = 96, depth: int = 2, num_heads: int = 4,
          dropout: float = 0.1) -> CARTE:
    """CARTE: a row as a star graph of its cells (column name + value embeddings), graph attention, centre readout."""
    return CARTE(embed_dim, num_classes, dim, depth, num_heads, dropout)
