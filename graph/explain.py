"""Explanations for graph attention models: the attention a node pays to its neighbours, per head and
layer, and a drawing of the node's ego graph with each edge drawn by its attention.

GAT's attention ``alpha_ij`` is a softmax over the in-neighbours ``j`` of node ``i`` (self-loop
included), so the weights into one node sum to 1 per head: that row is what the node "looks at".

>>> model = hub.load("gat.cora")
>>> graph = hub.core.registry.get_dataset_entry("cora").builder().graph   # after setup()
>>> [alpha.shape for _, alpha in neighbourhood_attention(model, graph.x, graph.edge_index, 0)]
[torch.Size([4, 8]), torch.Size([4, 1])]

``attnhub explain`` draws that figure; its numbers are the attention per layer over the node's neighbours
(:func:`node_explanation`), or, for ``--target CLASS``, Integrated Gradients (Captum) per neighbour.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import torch
from torch_geometric.utils import k_hop_subgraph, subgraph, to_undirected

from graph.io import node_features, read_graph_folder
from hub.attention.graph import CATLayer
from hub.errors import DataError
from hub.explain import Explanation, class_target, integrated_gradients
from hub.plotting import save_figure


def neighbourhood_attention(model, x: torch.Tensor, edge_index: torch.Tensor,
                            node: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer, ``(neighbours (K,), alpha (K, heads))``: the attention ``node`` pays to each neighbour
    (itself included, through the self-loop), in evaluation mode. ``model`` is a graph attention net
    with an ``attention(x, edge_index)`` method (GAT, GATv2, CAT)."""
    num_nodes = x.shape[0]
    if not 0 <= node < num_nodes:
        raise DataError(f"node index {node} is outside the graph's {num_nodes} nodes")
    was_training = model.training
    model.eval()
    try:
        layers = model.attention(x, edge_index)
    finally:
        model.train(was_training)
    result = []
    for edges, alpha in layers:
        into = edges[1] == node  # (E',) edges j -> node
        order = torch.argsort(edges[0, into])
        result.append((edges[0, into][order], alpha[into][order]))
    return result


def plot_node_attention(model, x: torch.Tensor, edge_index: torch.Tensor, node: int, path: str | Path,
                        names: list[str] | None = None, classes: list[str] | None = None,
                        max_neighbours: int = 30, title: str = "") -> Path:
    """One figure: a heads x neighbours heat map per layer, and the node's ego graph (its neighbours and
    the edges among them) with each edge into the node drawn as wide and dark as its first-layer
    attention averaged over heads. ``names`` label the nodes (default: their indices); ``classes`` add
    the predicted class of each drawn node. Keeps the ``max_neighbours`` most attended neighbours; ``title`` goes
    above the panels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import networkx as nx  # a dependency of torch itself; used only for the spring layout

    layers = neighbourhood_attention(model, x, edge_index, node)
    first_neighbours, first_alpha = layers[0]
    keep = first_alpha.mean(1).argsort(descending=True)[:max_neighbours]
    shown = set(first_neighbours[keep].tolist()) | {node}
    names = names or [str(i) for i in range(x.shape[0])]
    with torch.no_grad():
        model.eval()
        predicted = model(x, edge_index).argmax(-1)
    label = (lambda i: f"{names[i]}\n{classes[int(predicted[i])]}") if classes else (lambda i: names[i])

    fig, axes = plt.subplots(1, len(layers) + 1, figsize=(5 * (len(layers) + 1), 4.5),
                             gridspec_kw={"width_ratios": [1] * len(layers) + [1.6]})
    for index, (ax, (neighbours, alpha)) in enumerate(zip(axes, layers)):
        chosen = [i for i, n in enumerate(neighbours.tolist()) if n in shown]
        image = ax.imshow(alpha[chosen].T.numpy(), aspect="auto", cmap="viridis", vmin=0)
        ax.set_xticks(range(len(chosen)), [names[int(neighbours[i])] for i in chosen], rotation=90, fontsize=7)
        ax.set_yticks(range(alpha.shape[1]), [f"head {h}" for h in range(alpha.shape[1])], fontsize=7)
        ax.set_title(f"layer {index + 1}: attention of node {names[node]}")
        fig.colorbar(image, ax=ax, fraction=0.046)

    ego = nx.DiGraph()
    ego.add_nodes_from(shown)
    src, dst = edge_index
    among = torch.tensor([s in shown and d in shown and s != d for s, d in zip(src.tolist(), dst.tolist())])
    ego.add_edges_from(zip(src[among].tolist(), dst[among].tolist()))
    weight = {int(n): float(a) for n, a in zip(first_neighbours, first_alpha.mean(1))}
    layout = nx.spring_layout(ego, seed=0)
    ax = axes[-1]
    context = [(s, d) for s, d in ego.edges if d != node]
    nx.draw_networkx_edges(ego, layout, edgelist=context, ax=ax, edge_color="0.85", arrows=False)
    into = [(s, node) for s in shown if s != node and (s, node) in ego.edges]
    nx.draw_networkx_edges(ego, layout, edgelist=into, ax=ax, width=[1 + 8 * weight[s] for s, _ in into],
                           edge_color=[weight[s] for s, _ in into], edge_cmap=plt.cm.viridis,
                           edge_vmin=min(weight.values()), edge_vmax=max(weight.values()), arrows=True, arrowsize=8)
    nx.draw_networkx_nodes(ego, layout, ax=ax, node_size=[600 if n == node else 250 for n in ego.nodes],
                           node_color=["tab:red" if n == node else "tab:blue" for n in ego.nodes])
    nx.draw_networkx_labels(ego, layout, {n: label(n) for n in ego.nodes}, ax=ax, font_size=7)
    ax.set_title(f"ego graph of {names[node]} (self-attention {weight.get(node, 0.0):.2f})")
    ax.axis("off")
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    save_figure(fig, path)
    return Path(path)


def node_explanation(model, x: torch.Tensor, edge_index: torch.Tensor, node: int | None = None,
                     target: int | None = None, names: list[str] | None = None) -> Explanation:
    """What decided the class of ``node`` (default: the node with the most in-edges): for the top class, the
    attention it pays to its neighbours, values (layers, K) averaged over heads (K neighbours, itself included);
    for a class asked by ``target`` (the attention is the same for every class), Integrated Gradients (Captum) of
    that class's logit over every node's features, summed (signed) per neighbour, values (1, K); the same for CAT, whose
    conjoint attention is mostly a structural term that the weights barely change (Spearman 0.98 between the
    trained and a randomised ``cat.citeseer``'s attention: it fails the randomisation test)."""
    if node is None:
        node = int(torch.bincount(edge_index[1], minlength=x.shape[0]).argmax())
    names = names or [str(i) for i in range(x.shape[0])]
    layers = neighbourhood_attention(model, x, edge_index, node)
    neighbours = layers[0][0]
    with torch.no_grad():
        chosen, probability = class_target(model(x, edge_index)[node:node + 1], target)
    conjoint = any(isinstance(m, CATLayer) for m in model.modules())
    if target is None and not conjoint:
        values = torch.stack([alpha.mean(1) for _, alpha in layers if len(alpha) == len(neighbours)])
        method = f"graph attention of node {names[node]} on its neighbours, per layer (mean over heads)"
        axes = ("layer", "neighbour")
    else:
        # the node's output depends on its len(layers)-hop neighbourhood only (one hop more for CAT's structure)
        # (hops over both directions, as a model may make the graph undirected)
        subset = k_hop_subgraph(node, len(layers) + 1, to_undirected(edge_index, num_nodes=x.shape[0]),
                                num_nodes=x.shape[0])[0]
        edges = subgraph(subset, edge_index, relabel_nodes=True, num_nodes=x.shape[0])[0]
        centre = (subset == node).nonzero().view(-1)  # (1,)
        features = (x.to_dense() if x.layout != torch.strided else x)[subset]  # (n, F); Cora's x is sparse CSR
        attribution = integrated_gradients(lambda f: torch.cat([model(item, edges)[centre] for item in f]),
                                           (features[None],), chosen, steps=16)[0][0]  # (n, F)
        per_node = dict(zip(subset.tolist(), attribution.sum(1).tolist()))  # signed: for (+) or against (-)
        values = torch.tensor([per_node[int(n)] for n in neighbours])[None]
        axes = ("attribution", "neighbour")
        method = "Integrated Gradients (Captum) of the class, per neighbour's features: " + (
            "the attention is the same for every class" if target is not None else
            "CAT's conjoint attention is mostly its structural term, fixed by the graph (it fails the "
            "randomisation test)")
    labels = [names[int(n)] for n in neighbours]
    return Explanation(values.numpy(), method, chosen, probability, labels=labels, axes=axes,
                       extra={"node": node, "names": names, "model": model})


def graph_samples(card, inputs: list[str], data: str | None = None) -> Iterator[tuple[str, dict]]:
    """``(name, {"x", "edge_index", "node", "names"})`` per node: the ids of ``data``'s nodes.csv, or for the card's
    own dataset (Planetoid) node indices; default: 3 unlabelled (test) nodes."""
    from hub.run.evaluate import card_data

    if data is not None:
        graph, names, _, _ = read_graph_folder(data)
        x = node_features(graph.x, card.input_spec.get("normalize", False))
        candidates = torch.nonzero(graph.y < 0).view(-1).tolist() or list(range(graph.num_nodes))
    else:
        graph = card_data(card).graph
        x, names = graph.x, [str(i) for i in range(graph.num_nodes)]
        candidates = torch.nonzero(graph.test_mask).view(-1).tolist()
    if x.shape[1] != card.input_spec.get("num_features", x.shape[1]):
        raise DataError(f"the graph has {x.shape[1]} node features but {card.name} takes "
                        f"{card.input_spec['num_features']}")
    index = {name: i for i, name in enumerate(names)}
    unknown = [node for node in inputs if node not in index]
    if unknown:
        raise DataError(f"unknown node(s) {unknown[:5]}: expected ids of "
                        f"{data + '/nodes.csv' if data else 'node indices'}")
    for node in [index[n] for n in inputs] or candidates[:3]:
        yield f"node_{names[node]}", {"x": x, "edge_index": graph.edge_index, "node": node, "names": names}


def graph_explanation(model, x: torch.Tensor, edge_index: torch.Tensor, target: int | None = None) -> Explanation:
    """What decided the class of one whole graph: for the top class, the attention the pooling (PMA) pays to each
    node (values (N,)); for a class asked by ``target``, Integrated Gradients (Captum) over the node features, summed
    per node (signed)."""
    model.eval()
    with torch.no_grad():
        chosen, probability = class_target(model(x, edge_index), target)
    labels = [str(i) for i in range(x.shape[0])]
    if target is None:
        with torch.no_grad():
            return Explanation(model.pool_attention(x, edge_index).numpy(), "attention of the pooling (PMA) on each "
                               "node, mean over heads and seeds", chosen, probability, labels=labels, axes=("node",))
    attribution = integrated_gradients(lambda f: torch.cat([model(item, edge_index) for item in f]), (x[None],),
                                       chosen, steps=16)[0][0]
    return Explanation(attribution.sum(1).numpy(), "Integrated Gradients (Captum) of the class asked, per node's "
                       "features; the attention is the same for every class", chosen, probability, labels=labels,
                       axes=("node",))


def graph_set_samples(card, inputs: list[str]) -> Iterator[tuple[str, dict]]:
    """``(graphN, {"x", "edge_index"})`` per 1-based graph number of the card's test split (default: 1-4)."""
    from hub.run.evaluate import card_data

    graphs = card_data(card).test_set
    try:
        numbers = [int(i) for i in inputs] or list(range(1, min(4, len(graphs)) + 1))
    except ValueError:
        raise DataError(f"expected test graph numbers (1-based) to explain, got {inputs}") from None
    bad = [i for i in numbers if not 1 <= i <= len(graphs)]
    if bad:
        raise DataError(f"graph numbers {bad} are outside the test split's graphs 1-{len(graphs)}")
    for i in numbers:
        yield f"graph{i}", {"x": graphs[i - 1].x, "edge_index": graphs[i - 1].edge_index}
