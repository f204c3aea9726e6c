"""Export of every shipped tag, and of one tiny model per input kind, to ONNX and torch.export, checked against eager
PyTorch: the support matrix.

A tag exports to a format, and its artefact (run by onnxruntime, or the loaded ``.pt2`` program) gives eager
PyTorch's outputs within 1e-4 (fp32, max abs difference) on inputs of the card's shapes; or its family is in
:data:`UNSUPPORTED` and export raises a :class:`HubError` that names the reason.
"""
import dataclasses

import pytest
import torch

import hub
from hub.core.cards import write_card
from hub.core.weights import save_state_dict
from hub.deploy.exporter import example_inputs
from hub.models import model_card
from tests.unit.test_export import FORMATS, UNSUPPORTED, assert_exports_or_names_why_not, digit_inputs

# A second tag of a family already covered, and the slowest exports (each over ~20 s on one core, measured):
# still run in CI, out of the quick run
SLOW = {"coat_lite_micro_32.breastmnist", "coat_lite_micro_32.cifar10", "coat_lite_micro_32.cifar10_20k",
        "halonet_micro_32.cifar10", "resnet_cbam_micro_32.cifar10", "vit_micro_patch4_32.cifar10",
        "ssast_tiny.fsdd_full", "ssast_tiny.fsdd_ssl", "cat.citeseer", "gat.citeseer"}
TAGS = [pytest.param(tag, marks=pytest.mark.slow) if tag in SLOW else tag for tag in hub.list_models(pretrained=True)]
REAL_INPUTS = {"vit_digits.sklearn": digit_inputs}


def _parity_inputs(card) -> dict[str, torch.Tensor]:
    """Real inputs where they are cheap, else seeded inputs of the card's shapes (5 samples; graphs: 5 nodes)."""
    return REAL_INPUTS[card.name](card) if card.name in REAL_INPUTS else example_inputs(card, 5, seed=7)


@pytest.mark.parametrize("tag", TAGS)
def test_export_matches_pytorch_or_names_why_not(tag, tmp_path):
    card = model_card(tag)
    assert_exports_or_names_why_not(tag, card, tmp_path, _parity_inputs(card))


# ---- one tiny model per input kind -----------------------------------------------------------------------------

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
    "carte_table": ("carte.wine_pl", {"dim": 16, "num_heads": 2}, {}, FORMATS),
    "survival_table": ("survival_fusion.metabric", {"dim": 8, "num_heads": 2}, {}, FORMATS),
    "icu_stays": ("tfcam.physionet2012", {"dim": 8, "summary_dim": 16, "k": 2}, {}, ("pt2",)),
    "sensor_series": ("rul_attention.fd001", {"dim": 8, "num_heads": 2}, {}, ("pt2",)),
    "degradation_series": ("degradation_gru.laser", {"dim": 8, "num_heads": 2}, {}, ("pt2",)),
    "ppg_series": ("pulse.troika", {"dim": 8, "num_heads": 2, "num_bins": 41}, {}, FORMATS),
    "traffic_series": ("testam.los_loop", {"dim": 8, "num_heads": 1, "num_nodes": 5, "graph": _RING},
                       {"num_nodes": 5, "graph": _RING}, ("pt2",)),
    "graph": ("gat.cora", {"hidden": 4, "heads": 2}, {}, FORMATS),
    "graph-cat": ("cat.cora", {"hidden": 4, "heads": 2}, {}, FORMATS),
}


def _tiny_run(tag: str, model_args: dict, input_spec: dict, folder, family: str | None = None) -> None:
    """A run folder (``card.json`` and random weights) of the family of ``tag``, built with ``model_args`` replaced,
    whose card is the tag's with ``input_spec`` entries replaced and no calibration, OOD or predictor sections; with
    ``family``, of that family instead (a family without a tag of its own), built with ``model_args`` alone."""
    card = model_card(tag)
    family = family or card.family
    args = {**(card.model_args if family == card.family else {}), **model_args}
    torch.manual_seed(0)
    weights = folder / "model.safetensors"
    folder.mkdir()
    sha256 = save_state_dict(hub.create_model(family, **args).state_dict(), weights)
    tiny = dataclasses.replace(card, name=f"{family}.tiny", sha256=sha256, num_bytes=weights.stat().st_size,
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


# families without a tag yet (issue 66), on the CIFAR-10 tags' input: their attention pools and soft masks export
UNTAGGED = {
    "residual_attention_micro_32": {"num_classes": 10, "pool": "attention"},
    "patchconvnet_micro_32": {"num_classes": 10},
    "airbench_cbam_micro_32": {"num_classes": 10, "global_pool": "attention"},
    "resnet_cbam_micro_32": {"num_classes": 10, "global_pool": "attention"},
}


@pytest.mark.parametrize("family", UNTAGGED)
def test_untagged_vision_families_export_with_parity(family, tmp_path):
    _tiny_run("airbench_cbam_32.cifar10", UNTAGGED[family], {}, tmp_path / "run", family=family)
    run = str(tmp_path / "run")
    card = hub.model_card(run)
    assert card.family == family
    assert_exports_or_names_why_not(run, card, tmp_path, example_inputs(card, 5, seed=7))
