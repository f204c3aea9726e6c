"""Export to ONNX and torch.export, checked against eager PyTorch, on one tiny model per input kind: a family of a
shipped tag built with random weights and small dimensions, in a run folder whose card takes the tag's input (every
shipped tag: tests/integration/test_export_tags.py).

A model exports to a format, and its artefact (run by onnxruntime, or the loaded ``.pt2`` program) gives eager
PyTorch's outputs within 1e-4 (fp32, max abs difference) on inputs of the card's shapes; or its family is in
:data:`UNSUPPORTED` and export raises a :class:`HubError` that names the reason.
"""
import dataclasses
import json
import shutil

import numpy as np
import pytest
import torch

import hub
from hub.cli import main
from hub.core.cards import PretrainedCfg, write_card
from hub.core.weights import save_state_dict
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
_RING = {"neighbours": [[(i - 1) % 5, (i + 1) % 5] for i in range(5)]}  # a road of 5 sensors in a ring
# test id -> (the shipped tag whose family and input are taken, model arguments and input_spec entries replaced to
# make the model tiny, the formats exported); one id per input kind of the shipped tags and one per family that
# cannot be exported. Every kind goes through torch.export (the capture, with the kind's dynamic axes); ONNX, which
# costs about twice as much, for one kind per input dtype (float, int64 codes, bool masks) and for graphs (dynamic
# numbers of nodes and edges)
TINY = {
    "image": ("vit_digits.sklearn", {}, {}, FORMATS),  # already tiny: 8x8 images, width 64
    "scene": ("slot_autoencoder_micro_64.shapes", {"num_slots": 2, "num_iterations": 1}, {}, FORMATS),
    "audio": ("timbre_attention.fsdd", {"embed_dim": 16}, {}, ("pt2",)),
    "table": ("mlp.adult", {"hidden": 16, "depth": 1}, {}, FORMATS),
    "survival_table": ("survival_fusion.metabric", {"dim": 8, "num_heads": 2}, {}, FORMATS),
    "icu_stays": ("tfcam.physionet2012", {"dim": 8, "summary_dim": 16, "k": 2}, {}, ("pt2",)),
    "sensor_series": ("rul_attention.fd001", {"dim": 8, "num_heads": 2}, {}, ("pt2",)),
    "traffic_series": ("testam.los_loop", {"dim": 8, "num_heads": 1, "num_nodes": 5, "graph": _RING},
                       {"num_nodes": 5, "graph": _RING}, ("pt2",)),
    "graph": ("gat.cora", {"hidden": 4, "heads": 2}, {}, FORMATS),
    "graph-cat": ("cat.cora", {"hidden": 4, "heads": 2}, {}, FORMATS),
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


def _tiny_run(tag: str, model_args: dict, input_spec: dict, folder) -> None:
    """A run folder (``card.json`` and random weights) of the family of ``tag``, built with ``model_args`` replaced,
    whose card is the tag's with ``input_spec`` entries replaced and no calibration, OOD or predictor sections."""
    card = model_card(tag)
    args = {**card.model_args, **model_args}
    torch.manual_seed(0)
    weights = folder / "model.safetensors"
    folder.mkdir()
    sha256 = save_state_dict(hub.create_model(card.family, **args).state_dict(), weights)
    tiny = dataclasses.replace(card, name=f"{card.family}.tiny", sha256=sha256, num_bytes=weights.stat().st_size,
                               model_args=args, input_spec={**card.input_spec, **input_spec},
                               file=weights.name, url=None, calibration={}, ood={}, predictor={}, card_dir="")
    write_card(tiny, folder / "card.json")


def test_every_input_kind_of_a_shipped_tag_has_a_tiny_model():
    shipped = {model_card(tag).input_spec["kind"] for tag in hub.list_models(pretrained=True)}
    assert {model_card(tag).input_spec["kind"] for tag, *_ in TINY.values()} == shipped
    assert {model_card(tag).family for tag, *_ in TINY.values()} >= set(UNSUPPORTED)
    onnx = {kind for kind, (*_, formats) in TINY.items() if "onnx" in formats}
    assert onnx >= {"image", "table", "survival_table", "graph"}  # float, int64 codes, bool masks, nodes and edges


@pytest.mark.parametrize("kind", TINY)
def test_tiny_model_of_each_kind_exports_or_names_why_not(kind, tmp_path):
    tag, model_args, input_spec, formats = TINY[kind]
    _tiny_run(tag, model_args, input_spec, tmp_path / "run")
    run = str(tmp_path / "run")
    card = hub.model_card(run)
    assert_exports_or_names_why_not(run, card, tmp_path, example_inputs(card, 5, seed=7), formats)


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
