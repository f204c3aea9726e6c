"""Runs and predictions hold up under faults: failed checkpoint writes, 10k inputs (SIGKILL mid-epoch and resume:
tests/integration/test_training_runs.py)."""
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from PIL import Image

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


def _peak_rss_kib(files, out_csv):
    code = ("import resource, sys; from hub.cli import main; "
            f"rc = main(['predict', 'vit_digits.sklearn', '--out', {str(out_csv)!r}, '--batch-size', '256', "
            "'--no-progress', *sys.argv[1:]]); "
            "print('PEAK', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr); sys.exit(rc)")
    result = subprocess.run([sys.executable, "-c", code, *map(str, files)], capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    assert len(result.stdout.splitlines()) == len(files)
    return int(result.stderr.rsplit("PEAK", 1)[1].split()[0])


@pytest.mark.slow
def test_predict_10k_inputs_streams_with_bounded_memory(tmp_path):
    rng = np.random.default_rng(0)
    folder = tmp_path / "images"
    folder.mkdir()
    files = []
    for i in range(10_000):  # 1,000 random images, each also under 9 more names (hard links: cheaper to write)
        path = folder / f"{i:05d}.png"
        if i < 1000:
            Image.fromarray(rng.integers(0, 256, (8, 8), dtype=np.uint8), mode="L").save(path)
        else:
            os.link(files[i % 1000], path)
        files.append(path)
    small = _peak_rss_kib(files[:1000], tmp_path / "small.csv")
    large = _peak_rss_kib(files, tmp_path / "large.csv")
    assert len((tmp_path / "large.csv").read_text().splitlines()) == 10_001
    assert large - small < 40 * 1024, f"peak RSS grew from {small} KiB to {large} KiB with 10x the inputs"


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
