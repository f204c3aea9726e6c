"""Model names resolved once (:mod:`hub.names`): every form, and malformed names refused by their form alone."""
from pathlib import Path

import pytest

from hub.errors import RegistryError, UnknownModelError
from hub.names import ModelRef, RefKind, resolve


@pytest.mark.parametrize("name, expected", [
    ("gat", dict(kind=RefKind.FAMILY, family="gat")),
    ("vit_digits", dict(kind=RefKind.FAMILY, family="vit_digits")),
    ("gat.cora", dict(kind=RefKind.TAG, family="gat", tag="cora")),
    ("coat_lite_micro_32.cifar10-ft", dict(kind=RefKind.TAG, family="coat_lite_micro_32", tag="cifar10-ft")),
    ("runs/quickstart/x", dict(kind=RefKind.RUN, path=Path("runs/quickstart/x"))),
    ("./vit_digits", dict(kind=RefKind.RUN, path=Path("vit_digits"))),
    ("/abs/run", dict(kind=RefKind.RUN, path=Path("/abs/run"))),
    ("~/run", dict(kind=RefKind.RUN, path=Path.home() / "run")),
    (".hidden", dict(kind=RefKind.RUN, path=Path(".hidden"))),
    ("hf-hub:alice/vit-digits", dict(kind=RefKind.HF_HUB, repo="alice/vit-digits", revision=None)),
    ("hf-hub:alice/vit.digits_2@v1", dict(kind=RefKind.HF_HUB, repo="alice/vit.digits_2", revision="v1")),
    ("timm/vit_tiny_patch16_224", dict(kind=RefKind.TIMM, arch="vit_tiny_patch16_224")),
    ("timm/resnet18.a1_in1k", dict(kind=RefKind.TIMM, arch="resnet18.a1_in1k")),
])
def test_every_form_resolves_to_its_parts(name, expected):
    ref = resolve(name)
    assert ref.name == str(ref) == name
    for key, value in expected.items():
        assert getattr(ref, key) == value, key
    unset = {"family", "tag", "path", "repo", "revision", "arch"} - set(expected)
    assert all(getattr(ref, key) is None for key in unset)
    assert ref.has_card == (ref.kind in (RefKind.TAG, RefKind.RUN, RefKind.HF_HUB))


def test_a_reference_resolves_to_itself_and_a_path_object_is_a_run_folder():
    ref = resolve("gat.cora")
    assert resolve(ref) is ref
    assert resolve(Path("gat")) == ModelRef("gat", RefKind.RUN, path=Path("gat"))  # never the family gat
    assert resolve("gat").kind is RefKind.FAMILY  # the same text as a string: the family


@pytest.mark.parametrize("bad", ["", "Gat", "gat.Cora", "gat.", "gat..x", "torch.nn.Linear", "os.system()",
                                 "vit digits", "1gat", "gat.cora.x", "timm/"])
def test_malformed_names_are_refused_by_their_form(bad):
    with pytest.raises(RegistryError, match="malformed model name"):
        resolve(bad)


@pytest.mark.parametrize("bad", ["hf-hub:owner", "hf-hub:", "hf-hub:a/b/c", "hf-hub:-a/b@v1"])
def test_malformed_hub_repositories_are_refused(bad):
    with pytest.raises(UnknownModelError, match=f"malformed Hugging Face Hub repository '{bad}'"):
        resolve(bad)


def test_card_path_of_a_run_and_of_a_tag():
    class Card:
        card_dir, name = "/cards", "gat.cora"

    assert resolve("runs/x").card_path(Card()) == Path("/cards/card.json")
    assert resolve("gat.cora").card_path(Card()) == Path("/cards/gat.cora.json")


def test_model_card_of_every_form_that_has_one(tmp_path):
    import shutil

    import hub
    from hub.core.registry import get_model_entry

    card = hub.model_card("vit_digits.sklearn")
    shutil.copy(Path(card.card_dir) / "vit_digits.sklearn.json", tmp_path / "card.json")
    assert hub.model_card(str(tmp_path)).sha256 == hub.model_card(tmp_path).sha256 == card.sha256
    with pytest.raises(UnknownModelError, match="'vit_digits' is an untrained family and has no card"):
        hub.model_card("vit_digits")
    with pytest.raises(UnknownModelError, match="'timm/resnet18' is a timm architecture and has no model card"):
        hub.model_card("timm/resnet18")
    with pytest.raises(UnknownModelError, match="is not a run folder with a card.json"):
        hub.model_card(tmp_path / "missing")
    with pytest.raises(UnknownModelError, match="names a run folder, not a registered family or pretrained tag"):
        get_model_entry("runs/x")
