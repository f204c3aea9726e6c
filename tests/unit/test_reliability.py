"""Runs and predictions hold up under faults: failed checkpoint writes, fully masked attention inputs (10k inputs and
two processes on a cold cache: tests/integration/test_reliability_runs.py; SIGKILL mid-epoch and resume:
tests/integration/test_training_runs.py)."""
import os

import pytest
import torch

import hub
from hub.run.callbacks import AtomicCheckpointIO


def test_failed_checkpoint_write_keeps_previous_last(tmp_path, monkeypatch):
    path = tmp_path / "last.ckpt"
    io = AtomicCheckpointIO()
    io.save_checkpoint({"step": torch.tensor(1)}, path)

    def crash(fd):
        raise OSError("disk vanished mid-write")

    monkeypatch.setattr(os, "fsync", crash)
    with pytest.raises(OSError):
        io.save_checkpoint({"step": torch.tensor(2)}, path)
    monkeypatch.undo()
    assert io.load_checkpoint(path)["step"].item() == 1
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]


# ---- point 10: empty and fully masked attention inputs stay finite in every model that masks --------

def _finite_everywhere(out) -> bool:
    return all(torch.isfinite(t).all() for t in (out if isinstance(out, (tuple, list)) else [out]))


@pytest.mark.parametrize("name", ["set_transformer_max", "set_transformer_mog"])
def test_set_models_with_a_fully_masked_set_are_finite(name):
    model = hub.create_model(name, num_inds=4).eval()  # ISAB: the inducing points attend to an empty set
    dim = 1 if name.endswith("max") else 2
    x, mask = torch.randn(3, 5, dim), torch.ones(3, 5, dtype=torch.bool)
    mask[1] = False  # an empty set among full ones
    out = model(x, mask)
    assert _finite_everywhere(out)
    reference = model(x[[0]], mask[[0]])  # the empty set does not disturb the others
    first = out[0] if isinstance(out, torch.Tensor) else out[0][0]
    torch.testing.assert_close(first, reference[0] if isinstance(reference, torch.Tensor) else reference[0][0])


def test_survival_fusion_with_every_gene_and_tile_masked_is_finite():
    model = hub.create_model("survival_fusion", num_genes=4, num_clinical=3, image_backbone="resnet18",
                             num_image_tokens=2).eval()
    out = model(torch.randn(2, 3), genes=torch.randn(2, 4), gene_mask=torch.zeros(2, 4, dtype=torch.bool),
                tiles=torch.randn(2, 3, 3, 32, 32), tiles_mask=torch.zeros(2, 3, dtype=torch.bool))
    assert out.shape == (2,) and torch.isfinite(out).all()


@pytest.mark.parametrize("name", ["gat", "gatv2", "cat"])
def test_graph_models_on_isolated_nodes_are_finite(name):
    """Nodes without neighbours attend only to themselves (the self-loop): finite, and no edge needed."""
    model = hub.create_model(name, in_channels=6, num_classes=3).eval()
    x = torch.randn(5, 6)
    out = model(x, torch.tensor([[0, 1], [1, 0]]))  # nodes 2-4 isolated
    assert out.shape == (5, 3) and torch.isfinite(out).all()
    assert torch.isfinite(model(x, torch.empty(2, 0, dtype=torch.long))).all()


def test_graph_classifier_on_a_single_node_graph_is_finite():
    model = hub.create_model("gat_pma").eval()
    out = model(torch.randn(1, 2), torch.empty(2, 0, dtype=torch.long))
    assert out.shape == (1, 2) and torch.isfinite(out).all()
