"""Export to ONNX and torch.export, checked against eager PyTorch, of the 8x8-digits model: a run folder through the
CLI, an untrained family, refusals (one tiny model per input kind and every shipped tag, each exported and compared:
tests/integration/test_export_tags.py, out of the unit layer's time).

A model exports to a format, and its artefact (run by onnxruntime, or the loaded ``.pt2`` program) gives eager
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
from hub.core.cards import PretrainedCfg
from hub.deploy.exporter import run_artefact
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


def assert_exports_or_names_why_not(name: str, card: PretrainedCfg, tmp_path, inputs: dict[str, torch.Tensor],
                                    formats: tuple[str, ...] = FORMATS):
    """``hub.export(name)`` to each of ``formats`` gives eager PyTorch's outputs on ``inputs`` within
    :data:`TOLERANCE` and writes ``card`` and the preprocessing beside the artefact, or raises the HubError of
    :data:`UNSUPPORTED`."""
    for fmt in formats:
        out = tmp_path / fmt
        if card.family in UNSUPPORTED:
            with pytest.raises(HubError, match=UNSUPPORTED[card.family]):
                hub.export(name, fmt, out)
            continue
        path = hub.export(name, fmt, out)
        assert path == out / f"model.{fmt}"
        model = hub.load(name).eval()
        with torch.no_grad():
            expected = model(**inputs)
        got = run_artefact(path, inputs)
        assert got.shape == expected.shape
        assert (got - expected).abs().max().item() <= TOLERANCE, f"{name} {fmt}"
        assert json.loads((out / "card.json").read_text()) == card.to_dict()
        preprocess = json.loads((out / "preprocess.json").read_text())
        assert preprocess["input_spec"] == card.input_spec
        assert [i["name"] for i in preprocess["inputs"]] == list(inputs)
        assert preprocess["label_names"] == card.label_names and preprocess["output_names"] == card.output_names


def digit_inputs(card) -> dict[str, torch.Tensor]:
    """Five of scikit-learn's digits, scaled to [0, 1] and normalised as the card says."""
    from sklearn.datasets import load_digits

    images = torch.from_numpy(load_digits().images[:5].astype(np.float32) / 16)[:, None]  # (5, 1, 8, 8)
    mean, std = (torch.tensor(card.input_spec[k]).view(1, -1, 1, 1) for k in ("mean", "std"))
    return {"x": (images - mean) / std}


def test_export_of_a_run_folder_through_the_cli(tmp_path, capsys):
    card = model_card("vit_digits.sklearn")
    run = tmp_path / "runs" / "digits"
    run.mkdir(parents=True)
    shutil.copy(card.local_file, run / card.file)
    (run / "card.json").write_text(json.dumps(card.to_dict()))
    assert main(["export", str(run), "--format", "pt2", "--out", str(tmp_path / "out")]) == 0
    assert "model.pt2" in capsys.readouterr().out
    program = torch.export.load(tmp_path / "out" / "model.pt2").module()
    x = digit_inputs(card)["x"]
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
