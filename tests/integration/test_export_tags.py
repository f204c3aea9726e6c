"""Export of every shipped tag to ONNX and torch.export, checked against eager PyTorch: the support matrix (the
unit layer exports one tiny model per input kind: tests/unit/test_export.py).

A tag exports to a format, and its artefact (run by onnxruntime, or the loaded ``.pt2`` program) gives eager
PyTorch's outputs within 1e-4 (fp32, max abs difference) on inputs of the card's shapes; or its family is in
:data:`UNSUPPORTED` and export raises a :class:`HubError` that names the reason.
"""
import pytest
import torch

import hub
from hub.deploy.exporter import example_inputs
from hub.models import model_card
from tests.unit.test_export import assert_exports_or_names_why_not, digit_inputs

# A second tag of a family already covered, and the slowest exports (each over ~20 s on one core, measured):
# still run in CI, out of the quick run
SLOW = {"coat_lite_micro_32.breastmnist", "coat_lite_micro_32.cifar10", "halonet_micro_32.cifar10",
        "resnet_cbam_micro_32.cifar10", "vit_micro_patch4_32.cifar10", "ssast_tiny.fsdd_full", "ssast_tiny.fsdd_ssl",
        "cat.citeseer", "gat.citeseer"}
TAGS = [pytest.param(tag, marks=pytest.mark.slow) if tag in SLOW else tag for tag in hub.list_models(pretrained=True)]
REAL_INPUTS = {"vit_digits.sklearn": digit_inputs}


def _parity_inputs(card) -> dict[str, torch.Tensor]:
    """Real inputs where they are cheap, else seeded inputs of the card's shapes (5 samples; graphs: 5 nodes)."""
    return REAL_INPUTS[card.name](card) if card.name in REAL_INPUTS else example_inputs(card, 5, seed=7)


@pytest.mark.parametrize("tag", TAGS)
def test_export_matches_pytorch_or_names_why_not(tag, tmp_path):
    card = model_card(tag)
    assert_exports_or_names_why_not(tag, card, tmp_path, _parity_inputs(card))
