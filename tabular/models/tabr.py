"""TabR (Gorishniy et al., *TabR: Tabular Deep Learning Meets Nearest Neighbors*, ICLR 2024).

A feed-forward model with a retrieval module. Each row is embedded (periodic "PLR-lite" embeddings of the
numerics, learned embeddings of the categoricals), mapped by a linear layer and ``encoder_depth`` residual
blocks to ``x``, and to a key ``k = W_K(LayerNorm(x))``. The ``context_size`` training rows ("candidates")
whose keys are nearest (similarity ``-||k - k_i||^2``) are retrieved and attended with weights
``softmax(-||k - k_i||^2)``; each neighbour's value uses its *label*: ``W_Y(y_i) + T(k - k_i)`` with
``T = Linear -> ReLU -> Dropout -> Linear(no bias)``. The weighted sum is added to ``x``, then
``predictor_depth`` residual blocks and a head (LayerNorm -> ReLU -> Linear) predict.

Candidates: the training rows' preprocessed features and labels, kept as buffers (so they ship inside the
safetensors file and a loaded model predicts with no access to the data) and filled by ``set_candidates``
(in a recipe, by the :class:`tabular.data.TrainingRowCandidates` callback that the tabular data hands to the trainer).
In training, all candidate keys are recomputed at every step with the current encoder (without gradient),
the row itself is excluded (its ``index``), and the keys of the selected neighbours are computed again with
gradient (the paper's memory-efficient variant). In evaluation the candidate keys are computed once and cached
until the model trains or loads weights again. Retrieval is exact: one matmul and ``topk`` in torch; an
approximate index (faiss) is not a dependency and is not needed at these sizes (tens of thousands of rows).

Shapes:
    x_num (B, F), x_cat (B, C) int64, index (B,) optional -> logits (B, num_classes)
    retrieve -> neighbour rows (B, context_size) int64, weights (B, context_size)

>>> model = tabr(num_numeric=3, num_classes=2, num_candidates=50, dim=16, context_size=4)
>>> model.set_candidates(torch.randn(50, 3), torch.zeros(50, 0, dtype=torch.long), torch.randint(0, 2, (50,)))
>>> model(torch.randn(5, 3)).shape
torch.Size([5, 2])
"""
from __future__ import annotations

import torch
from torch import nn

from hub.core.registry import register_model
from hub.errors import DataError
from hub.layers.periodic_embeddings import PeriodicEmbeddings
from tabular.models.layers import CategoricalEmbeddings, check_numeric


class ResidualBlock(nn.Module):
    """x + Dropout(Linear(Dropout(ReLU(Linear(LN(x)))))). Shapes: (B, dim) -> (B, dim)"""

    def __init__(self, dim: int, dropout: float, norm: bool = True):
        super().__init__()
        self.body = nn.Sequential(nn.LayerNorm(dim) if norm else nn.Identity(), nn.Linear(dim, 2 * dim), nn.ReLU(),
                                  nn.Dropout(dropout), nn.Linear(2 * dim, dim), nn.Dropout(dropout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x)


class TabR(nn.Module):
    """TabR: an MLP encoder, attention over the nearest training rows with their labels, then an MLP (see the module).

    Args:
        num_numeric: number of numeric features F.
        cat_cardinalities: number of codes of each categorical column (its length is C; may be empty).
        num_classes: classes (1 for regression: the label enters the values through a linear layer).
        num_candidates: number of candidate rows (the training set's size); their buffers are filled by
            ``set_candidates`` and saved with the weights.
        dim: width of the representation, keys and values.
        encoder_depth: residual blocks after the input's linear layer (0: none, and no LayerNorm before the key).
        predictor_depth: residual blocks after the retrieved context is added.
        context_size: neighbours retrieved per row (m); needs more than m candidates.
        num_embed_dim: width of each numeric feature's periodic (PLR-lite) embedding.
        num_frequencies: learned frequencies per numeric feature in that embedding.
        frequency_sigma: standard deviation of the frequencies' initialisation.
        cat_dim: embedding width of each categorical column.
        dropout: dropout in the residual blocks, the value network ``T`` and on the attention weights.

    Shapes: x_num (B, F), x_cat (B, C) int64, index (B,) optional -> logits (B, num_classes)"""

    def __init__(self, num_numeric: int, cat_cardinalities: list[int], num_classes: int, num_candidates: int,
                 dim: int, encoder_depth: int, predictor_depth: int, context_size: int, num_embed_dim: int,
                 num_frequencies: int, frequency_sigma: float, cat_dim: int, dropout: float):
        super().__init__()
        self.num_numeric, self.num_classes, self.context_size = num_numeric, num_classes, context_size
        self.num_embed = PeriodicEmbeddings(num_numeric, num_embed_dim, num_frequencies, frequency_sigma)
        self.cat_embed = CategoricalEmbeddings(cat_cardinalities, cat_dim)
        self.linear = nn.Linear(num_numeric * num_embed_dim + len(cat_cardinalities) * cat_dim, dim)
        self.encoder = nn.Sequential(*(ResidualBlock(dim, dropout, norm=i > 0) for i in range(encoder_depth)))
        self.key_norm = nn.LayerNorm(dim) if encoder_depth else nn.Identity()
        self.key = nn.Linear(dim, dim)
        self.label = nn.Linear(1, dim) if num_classes == 1 else nn.Embedding(num_classes, dim)
        self.value = nn.Sequential(nn.Linear(dim, 2 * dim), nn.ReLU(), nn.Dropout(dropout),
                                   nn.Linear(2 * dim, dim, bias=False))  # T(k - k_i)
        self.attn_dropout = nn.Dropout(dropout)
        self.predictor = nn.Sequential(*(ResidualBlock(dim, dropout) for _ in range(predictor_depth)))
        self.num_features = dim
        self.reset_classifier(num_classes)
        self.register_buffer("cand_num", torch.zeros(num_candidates, num_numeric))
        self.register_buffer("cand_cat", torch.zeros(num_candidates, len(cat_cardinalities), dtype=torch.int32))
        self.register_buffer("cand_y", torch.zeros(num_candidates))
        self._cached_keys: torch.Tensor | None = None
        self.register_load_state_dict_post_hook(lambda module, keys: module._clear_cache())

    def reset_classifier(self, num_classes: int) -> None:
        self.head = nn.Sequential(nn.LayerNorm(self.num_features), nn.ReLU(), nn.Linear(self.num_features, num_classes))

    def _clear_cache(self) -> None:
        self._cached_keys = None

    def train(self, mode: bool = True):
        self._clear_cache()
        return super().train(mode)

    def set_candidates(self, x_num: torch.Tensor, x_cat: torch.Tensor, y: torch.Tensor) -> None:
        """The rows to retrieve from (the training rows, preprocessed); shapes must match ``num_candidates``."""
        if x_num.shape != self.cand_num.shape or x_cat.shape != self.cand_cat.shape:
            raise DataError(f"candidates of shape {tuple(x_num.shape)} / {tuple(x_cat.shape)} do not fit the model's "
                            f"{tuple(self.cand_num.shape)} / {tuple(self.cand_cat.shape)} (num_candidates, columns)")
        self.cand_num.copy_(x_num)
        self.cand_cat.copy_(x_cat)
        self.cand_y.copy_(y.float())
        self._clear_cache()

    def encode(self, x_num: torch.Tensor, x_cat: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows -> representation x (B, dim) and key k (B, dim)."""
        check_numeric(x_num, self.num_numeric)
        if x_cat is None:
            x_cat = x_num.new_zeros(x_num.shape[0], 0, dtype=torch.long)
        parts = [self.num_embed(x_num).flatten(1), self.cat_embed(x_cat).flatten(1)]  # (B, F * e), (B, C * c)
        x = self.encoder(self.linear(torch.cat(parts, -1)))
        return x, self.key(self.key_norm(x))

    def _candidate_keys(self) -> torch.Tensor:
        if self._cached_keys is not None:
            return self._cached_keys
        with torch.no_grad():
            keys = torch.cat([self.encode(n, c)[1] for n, c in zip(self.cand_num.split(8192),
                                                                   self.cand_cat.split(8192))])  # (N, dim)
        if not self.training:
            self._cached_keys = keys
        return keys

    def _neighbours(self, k: torch.Tensor, index: torch.Tensor | None) -> torch.Tensor:
        """Indices (B, m) of the nearest candidates by squared distance of keys, excluding ``index``."""
        keys = self._candidate_keys()  # (N, dim)
        if len(keys) < self.context_size + (index is not None):
            raise DataError(f"TabR needs more than context_size={self.context_size} candidates, has {len(keys)}")
        similarity = 2 * k.detach() @ keys.T - keys.pow(2).sum(-1)  # (B, N); -||k - k_i||^2 up to a row constant
        if index is not None:
            similarity[torch.arange(len(k), device=k.device), index] = float("-inf")  # a row is not its own neighbour
        return similarity.topk(self.context_size, dim=-1).indices  # (B, m)

    def _context(self, x_num, x_cat, index):
        """Representation x (B, dim), neighbour rows (B, m), key differences k - k_i (B, m, dim), weights (B, m)."""
        x, k = self.encode(x_num, x_cat)
        rows = self._neighbours(k, index)
        if self.training:  # keys of the chosen neighbours again, with gradient
            _, context_k = self.encode(self.cand_num[rows].flatten(0, 1), self.cand_cat[rows].flatten(0, 1))
            context_k = context_k.view(*rows.shape, -1)  # (B * m, dim) -> (B, m, dim)
        else:
            context_k = self._candidate_keys()[rows]  # (B, m, dim)
        delta = k[:, None] - context_k  # (B, m, dim)
        return x, rows, delta, (-delta.pow(2).sum(-1)).softmax(-1)

    def retrieve(self, x_num: torch.Tensor, x_cat: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Which candidate rows (B, m) a prediction attends to, and with what weight (B, m) (explanations)."""
        _, rows, _, weights = self._context(x_num, x_cat, None)
        return rows, weights

    def forward_features(self, x_num: torch.Tensor, x_cat: torch.Tensor | None = None,
                         index: torch.Tensor | None = None) -> torch.Tensor:
        x, rows, delta, weights = self._context(x_num, x_cat, index)
        labels = self.cand_y[rows]  # (B, m)
        label_embed = self.label(labels[..., None]) if self.num_classes == 1 else self.label(labels.long())
        values = label_embed + self.value(delta)  # (B, m, dim)
        context = (self.attn_dropout(weights)[..., None] * values).sum(1)  # (B, dim)
        return self.predictor(x + context)

    def forward_head(self, features: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        return features if pre_logits else self.head(features)

    def forward(self, x_num: torch.Tensor, x_cat: torch.Tensor | None = None,
                index: torch.Tensor | None = None) -> torch.Tensor:
        """``index``: the rows' positions among the candidates (training rows), excluded from their own context."""
        return self.forward_head(self.forward_features(x_num, x_cat, index))


@register_model(task="tabular")
def tabr(num_numeric: int = 8, cat_cardinalities: list[int] = (), num_classes: int = 2, num_candidates: int = 128,
         dim: int = 96, encoder_depth: int = 0, predictor_depth: int = 1, context_size: int = 32,
         num_embed_dim: int = 16, num_frequencies: int = 16, frequency_sigma: float = 0.1, cat_dim: int = 8,
         dropout: float = 0.1) -> TabR:
    """TabR: retrieval of the nearest training rows with label-aware attention, then an MLP."""
    return TabR(num_numeric, list(cat_cardinalities), num_classes, num_candidates, dim, encoder_depth,
                predictor_depth, context_size, num_embed_dim, num_frequencies, frequency_sigma, cat_dim, dropout)
