"""Export of every shipped tag to ONNX and torch.export, checked against eager PyTorch: the support matrix.

A tag exports to a format, and its artefact (run by onnxruntime, or the loaded ``.pt2`` program) gives eager
PyTorch's outputs within 1e-4 (fp32, max abs difference) on inputs of the card's shapes; or its family is in
:data:`UNSUPPORTED` and export raises a :class:`HubError` that names the reason.
"""
import json
import shutil

import numpy as np
import pytest
import torch

import hub
from hub.cli import main
from hub.deploy.exporter import example_inputs, run_artefact
from hub.errors import HubError
from hub.models import model_card

TOLERANCE = 1e-4  # every exportable family meets it in fp32
FORMATS = ("onnx", "pt2")
# family -> words of the HubError that export raises for both formats
UNSUPPORTED = {
    # CAT computes its graph's conjoint structure (clusters) from the values of edge_index, in Python
    "cat": r"data-dependent control flow.*graph/models/gat\.py:\d+ in _graph",
    # slot attention draws its initial slots at random in every forward, also in eval mode
    "slot_autoencoder_micro_64": "not a deterministic function of its input",
}
# A second tag of a family already covered, and the slowest exports (each over ~20 s on one core, measured):
# still run in CI, out of the quick run
SLOW = {"coat_lite_micro_32.breastmnist", "coat_lite_micro_32.cifar10", "halonet_micro_32.cifar10",
        "resnet_cbam_micro_32.cifar10", "vit_micro_patch4_32.cifar10", "ssast_tiny.fsdd_full", "ssast_tiny.fsdd_ssl",
        "cat.citeseer", "gat.citeseer"}
TAGS = [pytest.param(tag, marks=pytest.mark.slow) if tag in SLOW else tag for tag in hub.list_models(pretrained=True)]


def _digits(card) -> dict[str, torch.Tensor]:
    """Five of scikit-learn's digits, scaled to [0, 1] and normalised as the card says."""
    from sklearn.datasets import load_digits

    images = torch.from_numpy(load_digits().images[:5].astype(np.float32) / 16)[:, None]  # (5, 1, 8, 8)
    mean, std = (torch.tensor(card.input_spec[k]).view(1, -1, 1, 1) for k in ("mean", "std"))
    return {"x": (images - mean) / std}


REAL_INPUTS = {"vit_digits.sklearn": _digits}


def _parity_inputs(card) -> dict[str, torch.Tensor]:
    """Real inputs where they are cheap, else seeded inputs of the card's shapes (5 samples; graphs: 5 nodes)."""
    return REAL_INPUTS[card.name](card) if card.name in REAL_INPUTS else example_inputs(card, 5, seed=7)


@pytest.mark.parametrize("tag", TAGS)
def test_export_matches_pytorch_or_names_why_not(tag, tmp_path):
    card = model_card(tag)
    for fmt in FORMATS:
        out = tmp_path / fmt
        if card.family in UNSUPPORTED:
            with pytest.raises(HubError, match=UNSUPPORTED[card.family]):
                hub.export(tag, fmt, out)
            continue
        path = hub.export(tag, fmt, out)
        assert path == out / f"model.{fmt}"
        inputs = _parity_inputs(card)
        model = hub.load(tag).eval()
        with torch.no_grad():
            expected = model(**inputs)
        got = run_artefact(path, inputs)
        assert got.shape == expected.shape
        assert (got - expected).abs().max().item() <= TOLERANCE, f"{tag} {fmt}"
        assert json.loads((out / "card.json").read_text()) == card.to_dict()
        preprocess = json.loads((out / "preprocess.json").read_text())
        assert preprocess["input_spec"] == card.input_spec
        assert [i["name"] for i in preprocess["inputs"]] == list(inputs)
        assert preprocess["label_names"] == card.label_names and preprocess["output_names"] == card.output_names


def test_export_of_a_run_folder_through_the_cli(tmp_path, capsys):
    card = model_card("vit_digits.sklearn")
    run = tmp_path / "runs" / "digits"
    run.mkdir(parents=True)
    shutil.copy(card.local_file, run / card.file)
    (run / "card.json").write_text(json.dumps(card.to_dict()))
    assert main(["export", str(run), "--format", "pt2", "--out", str(tmp_path / "out")]) == 0
    assert "model.pt2" in capsys.readouterr().out
    program = torch.export.load(tmp_path / "out" / "model.pt2").module()
    x = _digits(card)["x"]
    assert program(x=x).argmax(1).tolist() == hub.load(str(run))(x).argmax(1).tolist()


def test_untrained_family_takes_the_input_of_its_tag(tmp_path):
    path = hub.export("vit_digits", "pt2", tmp_path)
    preprocess = json.loads((tmp_path / "preprocess.json").read_text())
    assert preprocess["inputs"] == [{"name": "x", "shape": ["batch", 1, 8, 8], "dtype": "float32"}]
    assert run_artefact(path, {"x": torch.zeros(3, 1, 8, 8)}).shape == (3, 10)


def test_export_refuses_what_it_cannot_export():
    with pytest.raises(HubError, match="input cannot be inferred"):
        hub.export("deep_sets_max", "onnx")  # an untrained family without a tag
    with pytest.raises(HubError, match="unknown export format 'tflite'"):
        hub.export("vit_digits.sklearn", "tflite")
