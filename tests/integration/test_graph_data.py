"""graph/ and hub.attention.graph: layers, models, data, user graph folders, shipped weights, CLI."""
from __future__ import annotations

import pytest
import torch

import hub


def test_planetoid_public_split():
    from graph.data import citeseer, cora

    for builder, nodes, features, train in ((cora, 2708, 1433, 140), (citeseer, 3327, 3703, 120)):
        data = builder()
        data.setup("fit")
        assert data.graph.x.shape == (nodes, features) and data.graph.x.layout == torch.sparse_csr
        assert data.info["split"] == {"train": train, "val": 500, "test": 1000}


SHIPPED = ["gat.cora", "gat.citeseer", "cat.cora", "cat.citeseer"]


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_weights_reproduce_their_card(name):
    from hub.run.evaluate import evaluate

    card = hub.model_card(name)
    assert card.num_bytes < 2_000_000
    result = evaluate(name, progress=False)
    assert result["test/acc"] == pytest.approx(card.metrics["test/acc"]["values"][0], abs=1e-4)
