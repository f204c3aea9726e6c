"""Graph attention: GAT / GATv2 layers through PyG, and Conjoint Attention (CAT).

- :class:`GATLayer`: the graph attention layer of Veličković et al., *Graph Attention Networks*
  (ICLR 2018), or GATv2 (Brody et al., *How Attentive are Graph Attention Networks?*, ICLR 2022),
  computed by PyG's ``GATConv`` / ``GATv2Conv``.
- :class:`CATLayer`: conjoint attention of He, Ong and Bai, *Learning Conjoint Attentions for Graph
  Neural Nets* (NeurIPS 2021): the feature score of GAT plus structural interventions computed
  outside the GNN (:func:`conjoint_structure`: node cluster embeddings and higher-order structural
  correlations), combined in the *implicit* or the *explicit* way.
- :func:`sparse_input_dropout`: dropout that draws its mask over the stored entries of a sparse
  feature matrix only (same distribution as dense dropout: a zero stays zero either way).

Every layer can return its edge attention weights ``(edge_index, alpha)``; in eval mode they sum
to 1 over each node's incoming edges (self-loops included).
"""
from __future__ import annotations

import warnings

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn import GATConv, GATv2Conv, MessagePassing
from torch_geometric.nn.inits import glorot, zeros
from torch_geometric.utils import remove_self_loops, softmax

CAT_VARIANTS = ("implicit", "explicit")
warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta state")
warnings.filterwarnings("ignore", message="Sparse invariant checks are implicitly disabled")


def sparse_input_dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Dropout over the stored values of a sparse CSR/COO ``x``; plain dropout for a dense ``x``.

    Bag-of-words features are ~99% zeros: drawing the mask over the nonzero entries only gives the
    same output distribution as ``F.dropout`` on the dense matrix at a fraction of the cost.

    Shapes:
        x: (N, F) dense, sparse CSR or sparse COO -> same shape and layout.

    >>> x = torch.eye(4).to_sparse_csr()
    >>> sparse_input_dropout(x, 0.5, training=True).layout
    torch.sparse_csr
    """
    if not training or p == 0.0:
        return x
    if x.layout == torch.sparse_csr:
        values = F.dropout(x.values(), p, True)
        return torch.sparse_csr_tensor(x.crow_indices(), x.col_indices(), values, x.shape, check_invariants=False)
    if x.layout == torch.sparse_coo:
        x = x.coalesce()
        return torch.sparse_coo_tensor(x.indices(), F.dropout(x.values(), p, True), x.shape, is_coalesced=True,
                                       check_invariants=False)
    return F.dropout(x, p, True)


class GATLayer(nn.Module):
    """Multi-head graph attention (GAT, or GATv2 with ``v2=True``) computed by PyG.

    ``alpha_ij = softmax_j(LeakyReLU(a^T [W h_i || W h_j]))`` over the in-neighbours j of i (self-loop
    added); heads are concatenated (``concat=True``) or averaged. ``dropout`` drops attention weights.
    A sparse CSR ``x`` is accepted (the projection is a sparse-dense product).

    Args:
        in_channels: input node feature width.
        out_channels: output width of each head.
        heads: attention heads (default 1).
        concat: concatenate the heads (True, default) or average them.
        dropout: dropout on the attention weights (default 0).
        negative_slope: slope of the LeakyReLU in the scores (default 0.2).
        v2: GATv2's scores ``a^T LeakyReLU(W [h_i || h_j])`` instead of GAT's (default False).
        bias: add a learned bias to the output (default True).

    Shapes:
        x: (N, in_channels), edge_index: (2, E) -> (N, heads * out_channels) if concat else (N, out_channels);
        attention: (edge_index (2, E + N), alpha (E + N, heads)).

    >>> layer = GATLayer(16, 8, heads=4)
    >>> layer(torch.randn(5, 16), torch.tensor([[0, 1, 2], [1, 2, 3]])).shape
    torch.Size([5, 32])
    """

    def __init__(self, in_channels: int, out_channels: int, heads: int = 1, concat: bool = True,
                 dropout: float = 0.0, negative_slope: float = 0.2, v2: bool = False, bias: bool = True):
        super().__init__()
        self.in_channels, self.out_channels, self.heads, self.concat, self.v2 = (
            in_channels, out_channels, heads, concat, v2)
        conv = GATv2Conv if v2 else GATConv
        self.conv = conv(in_channels, out_channels, heads=heads, concat=concat, dropout=dropout,
                         negative_slope=negative_slope, add_self_loops=True, bias=bias)

    def reset_parameters(self) -> None:
        self.conv.reset_parameters()

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, return_attention: bool = False):
        if return_attention:
            out, (edges, alpha) = self.conv(x, edge_index, return_attention_weights=True)
            return out, (edges, alpha)
        return self.conv(x, edge_index)

    def extra_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, heads={self.heads}, concat={self.concat}, "
                f"dropout={self.conv.dropout}, v2={self.v2}")


def conjoint_structure(edge_index: torch.Tensor, num_nodes: int, num_clusters: int = 16,
                       seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """The structural interventions of CAT, computed once from the graph outside the GNN.

    The graph is made undirected with self-loops (``Â = A + I``). Per edge (i, j) of ``Â``:

    - **cluster**: cosine similarity of the nodes' cluster embeddings, the top ``num_clusters``
      singular vectors of ``D^-1/2 Â D^-1/2`` scaled by their singular values (a spectral
      embedding whose clusters are the graph's communities), in [-1, 1];
    - **higher-order**: the 2-hop structural correlation ``|N(i) ∩ N(j)| / sqrt(|N(i)| |N(j)|)``
      over the closed neighbourhoods (Salton index on ``Â``), in (0, 1].

    Shapes:
        edge_index: (2, E) -> (edge_index with self-loops (2, E'), structure (E', 2)).

    >>> edges, structure = conjoint_structure(torch.tensor([[0, 1, 2], [1, 2, 0]]), 3, num_clusters=2)
    >>> structure.shape  # the directed triangle made undirected (6 edges) plus 3 self-loops
    torch.Size([9, 2])
    """
    import scipy.sparse as sp
    from sklearn.utils.extmath import randomized_svd

    edges, _ = remove_self_loops(edge_index.detach().cpu())
    src, dst = edges.numpy()
    adj = sp.coo_matrix((np.ones(len(src)), (src, dst)), shape=(num_nodes, num_nodes)).tocsr()
    adj = ((adj + adj.T + sp.identity(num_nodes, format="csr")) > 0).astype(np.float64)  # Â, symmetric
    degree = np.asarray(adj.sum(1)).ravel()
    scale = sp.diags(1.0 / np.sqrt(degree))
    k = max(1, min(num_clusters, num_nodes - 1))
    u, s, _ = randomized_svd(scale @ adj @ scale, n_components=k, random_state=seed)
    embedding = u * np.sqrt(s)  # (N, k)
    embedding /= np.linalg.norm(embedding, axis=1, keepdims=True).clip(min=1e-12)
    looped = adj.tocoo()
    rows, cols = looped.row, looped.col  # (E',), message j=col -> i=row
    cluster = (embedding[rows] * embedding[cols]).sum(1)
    common = (adj @ adj).multiply(adj).tocoo()  # common closed neighbours on the edges of Â
    order = np.lexsort((common.col, common.row))
    lookup = common.row[order].astype(np.int64) * num_nodes + common.col[order]
    position = np.searchsorted(lookup, rows.astype(np.int64) * num_nodes + cols)
    higher_order = common.data[order][position] / np.sqrt(degree[rows] * degree[cols])
    out_edges = torch.from_numpy(np.stack([cols, rows]).astype(np.int64))  # (2, E'): source j, target i
    structure = torch.from_numpy(np.stack([cluster, higher_order], 1)).float()  # (E', 2)
    return out_edges.to(edge_index.device), structure.to(edge_index.device)


class CATLayer(MessagePassing):
    """Conjoint attention layer (CAT; He, Ong and Bai, NeurIPS 2021).

    The feature score is GAT's ``e_ij = LeakyReLU(a_dst^T W h_i + a_src^T W h_j)``. The structural
    interventions ``s_ij`` (S of them per edge, see :func:`conjoint_structure`) enter per head as
    ``c_ij = w_h^T s_ij`` with learned ``w_h``:

    - ``explicit``: ``alpha_ij = exp(e_ij) exp(c_ij) / sum_k exp(e_ik) exp(c_ik)``: the structure
      multiplies the feature attention before normalisation;
    - ``implicit``: ``alpha_ij = r_f softmax_j(e_ij) + r_s softmax_j(c_ij)``, with the relative
      significance ``(r_f, r_s) = softmax(g)`` of the two criteria learned per head.

    With ``structure=None`` the structural terms are switched off and the scores are GAT's. The
    edges must already hold self-loops (as :func:`conjoint_structure` returns them).

    Args:
        in_channels: input node feature width.
        out_channels: output width of each head.
        heads: attention heads (default 1).
        concat: concatenate the heads (True, default) or average them.
        dropout: dropout on the attention weights (default 0).
        negative_slope: slope of the LeakyReLU in the feature scores (default 0.2).
        variant: ``"implicit"`` (default) or ``"explicit"``, how the structure enters the attention (above).
        num_structural: S, the structural interventions per edge (2 from :func:`conjoint_structure`).
        bias: add a learned bias to the output (default True).

    Shapes:
        x: (N, in_channels), edge_index: (2, E), structure: (E, num_structural) ->
        (N, heads * out_channels) if concat else (N, out_channels); attention (edge_index, (E, heads)).

    >>> edges, structure = conjoint_structure(torch.tensor([[0, 1, 2], [1, 2, 0]]), 3, num_clusters=2)
    >>> CATLayer(16, 8, heads=2)(torch.randn(3, 16), edges, structure).shape
    torch.Size([3, 16])
    """

    def __init__(self, in_channels: int, out_channels: int, heads: int = 1, concat: bool = True,
                 dropout: float = 0.0, negative_slope: float = 0.2, variant: str = "implicit",
                 num_structural: int = 2, bias: bool = True):
        super().__init__(aggr="add", node_dim=0)
        if variant not in CAT_VARIANTS:
            raise ValueError(f"CAT variant must be one of {CAT_VARIANTS}, got {variant!r}")
        self.in_channels, self.out_channels, self.heads, self.concat = in_channels, out_channels, heads, concat
        self.dropout, self.negative_slope, self.variant, self.num_structural = (
            dropout, negative_slope, variant, num_structural)
        self.lin = nn.Linear(in_channels, heads * out_channels, bias=False)
        self.att_src = nn.Parameter(torch.empty(1, heads, out_channels))
        self.att_dst = nn.Parameter(torch.empty(1, heads, out_channels))
        self.structure_weight = nn.Parameter(torch.empty(heads, num_structural))  # w_h
        self.mix = nn.Parameter(torch.empty(heads, 2)) if variant == "implicit" else None  # g -> (r_f, r_s)
        self.bias = nn.Parameter(torch.empty(heads * out_channels if concat else out_channels)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        glorot(self.lin.weight)
        glorot(self.att_src)
        glorot(self.att_dst)
        nn.init.ones_(self.structure_weight)
        if self.mix is not None:
            zeros(self.mix)
        if self.bias is not None:
            zeros(self.bias)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, structure: torch.Tensor | None = None,
                return_attention: bool = False):
        num_nodes = x.shape[0]
        if structure is not None and structure.shape != (edge_index.shape[1], self.num_structural):
            raise ValueError(f"expected structure of shape ({edge_index.shape[1]}, {self.num_structural}) "
                             f"(one row per edge), got {tuple(structure.shape)}")
        h = self.lin(x).view(num_nodes, self.heads, self.out_channels)  # (N, H, C)
        src, dst = edge_index
        score = F.leaky_relu((h * self.att_src).sum(-1)[src] + (h * self.att_dst).sum(-1)[dst],
                             self.negative_slope)  # (E, H)
        if structure is None:
            alpha = softmax(score, dst, num_nodes=num_nodes)
        else:
            conjoint = structure @ self.structure_weight.t()  # (E, H)
            if self.variant == "explicit":
                alpha = softmax(score + conjoint, dst, num_nodes=num_nodes)
            else:
                r = self.mix.softmax(-1)  # (H, 2)
                alpha = (r[:, 0] * softmax(score, dst, num_nodes=num_nodes)
                         + r[:, 1] * softmax(conjoint, dst, num_nodes=num_nodes))
        dropped = F.dropout(alpha, self.dropout, self.training)
        out = self.propagate(edge_index, h=h, alpha=dropped, size=(num_nodes, num_nodes))  # (N, H, C)
        out = out.reshape(num_nodes, -1) if self.concat else out.mean(1)
        if self.bias is not None:
            out = out + self.bias
        return (out, (edge_index, alpha)) if return_attention else out

    def message(self, h_j: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
        return h_j * alpha.unsqueeze(-1)  # (E, H, C)

    def extra_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, heads={self.heads}, concat={self.concat}, "
                f"dropout={self.dropout}, variant={self.variant}, num_structural={self.num_structural}")

    def __repr__(self) -> str:  # MessagePassing's repr ignores extra_repr
        return f"{type(self).__name__}({self.extra_repr()})"

