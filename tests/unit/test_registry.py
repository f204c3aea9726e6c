import dataclasses
import subprocess
import sys

import pytest
import torch

import hub
from hub.core.index import build_index
from hub.core.registry import Registry, read_index, register_model
from hub.errors import HubError, RegistryError, UnknownModelError


def test_import_hub_is_light():
    code = ("import sys, hub; heavy = [m for m in ('torch_geometric', 'timm', 'torchaudio', 'pytorch_lightning', "
            "'lightning', 'vision') if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_unknown_name_lists_closest():
    with pytest.raises(UnknownModelError, match="vit_digits"):
        hub.load("vit_digit")


def test_unknown_tag_lists_tags():
    with pytest.raises(UnknownModelError, match="vit_digits.sklearn"):
        hub.load("vit_digits.imagenet")


@pytest.mark.parametrize("bad", ["torch.nn.Linear", "os.system()", "Vit_Digits", "vit digits"])
def test_malformed_names_and_import_paths_refused(bad):
    with pytest.raises((RegistryError, UnknownModelError)):
        hub.load(bad)


def test_register_twice_raises_even_before_the_domain_is_imported():
    with pytest.raises(RegistryError, match="registered twice: by the vision package"):
        @register_model(task="image-classification", domain="vision")
        def vit_digits():  # noqa: F811
            return torch.nn.Linear(1, 1)


def test_registry_type_names_duplicates_and_close_names():
    tasks = Registry("task")
    tasks.register("classification", int)
    with pytest.raises(RegistryError, match="task 'classification' is registered twice: by builtins.int and by "
                                            "builtins.float"):
        tasks.register("classification", float)
    with pytest.raises(UnknownModelError, match="unknown task 'clasification'; closest: classification"):
        tasks.get("clasification")
    tasks.decorator("regression")(float)
    assert tasks.names() == ["classification", "regression"] and tasks.names("reg*") == ["regression"]
    assert "regression" in tasks and list(tasks) == tasks.names()


def test_index_is_current():
    """hub/index.json is what the registry holds after importing every domain; regenerate it with
    `python -m hub.core.index` after adding or changing a family or dataset."""

    @register_model(task="image-classification", domain="vision")
    def index_test_family():  # registered at run time (as tests and users do): never part of the index
        return torch.nn.Linear(1, 1)

    assert build_index() == read_index(), "hub/index.json is out of date: run `python -m hub.core.index`"


def _modules_after(code: str) -> list[str]:
    probe = ("import sys; print(sorted(m for m in ('torch', 'vision', 'graph', 'audio', 'tabular', 'medical', "
             "'timeseries', 'torch_geometric', 'torchaudio', 'sklearn', 'pandas') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", f"{code}\n{probe}"], capture_output=True, text=True, check=True)
    return eval(out.stdout.strip().splitlines()[-1])  # a list of names printed by the probe above


def test_listing_and_info_import_no_domain_nor_torch():
    code = "from hub.cli import main; main(['list']); main(['info', 'gat']); main(['info', 'gat.cora'])"
    assert _modules_after(code) == []


def test_loading_a_vit_imports_only_the_vision_domain():
    assert _modules_after("import hub; hub.load('vit_digits.sklearn')") == ["torch", "vision"]


def test_a_folder_named_like_a_family_does_not_shadow_it(tmp_path, monkeypatch):
    (tmp_path / "vit_digits").mkdir()
    (tmp_path / "vit_digits" / "card.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    model = hub.load("vit_digits")  # the family, untrained: names are never looked up on the disk
    assert getattr(model, "pretrained_cfg", None) is None
    with pytest.raises(UnknownModelError, match="vit_digits/missing is not a finished run folder"):
        hub.load_run("vit_digits/missing")
    with pytest.raises(UnknownModelError, match="malformed Hugging Face Hub repository 'hf-hub:owner'"):
        hub.load("hf-hub:owner")  # told by its form before any download


def test_list_models_filters():
    assert "vit_digits" in hub.list_models("vit_*")
    assert "vit_digits" in hub.list_models(domain="vision", task="image-classification")
    assert hub.list_models("nothing_like_this*") == []
    assert "vit_digits.sklearn" in hub.list_models(pretrained=True)
    with pytest.raises(UnknownModelError, match="expected one of"):
        hub.list_models(domain="astrology")


def test_family_builds_untrained_model():
    model = hub.load("vit_digits", num_classes=4)
    assert model(torch.zeros(2, 1, 8, 8)).shape == (2, 4)
    assert not hasattr(model, "pretrained_cfg") or model.pretrained_cfg is None


def test_model_card_fields():
    card = hub.model_card("vit_digits.sklearn")
    assert card.task == "image-classification"
    assert card.label_names == [str(d) for d in range(10)]
    assert len(card.sha256) == 64
    assert card.metrics["test/acc"]["n"] == len(card.metrics["test/acc"]["values"]) == len(card.recipe["seeds"]) == 3
    assert card.recipe["path"] == "recipes/vision/vit_digits_sklearn.yaml"  # the tag's own recipe, not the quickstart
    assert card.input_spec == {"kind": "image", "height": 8, "width": 8, "channels": 1, "mean": [0.5], "std": [0.5]}
    assert card.data["license"]


@pytest.mark.parametrize("name, names, intervals", [
    ("rul_attention.fd001", ["rul", *(f"rul_plus_{h}" for h in range(1, 10))], True),
    ("testam.los_loop", [f"speed_{5 * h}min" for h in range(1, 13)], True),
    ("survival_fusion.metabric", ["risk"], False),  # a Cox risk has no target in its units: no interval
])
def test_regression_cards_name_their_outputs_in_the_predict_header(name, names, intervals):
    from hub.deploy.predict import prediction_cells

    card = hub.model_card(name)
    assert card.output_names == names
    header, rows = prediction_cells(torch.arange(2.0 * len(names)).reshape(2, len(names)), card, 3)
    assert header == ([c for n in names for c in (n, f"{n}_lower_90", f"{n}_upper_90")] if intervals else names)
    assert rows[1][0] == f"{len(names):.6f}"
    with pytest.raises(HubError, match=f"names {len(names)} outputs .* gave {len(names) + 1} per input"):
        prediction_cells(torch.zeros(2, len(names) + 1), card, 3)


def test_predict_header_falls_back_to_numbered_outputs_and_classes_keep_theirs():
    from hub.deploy.predict import prediction_cells

    unnamed = dataclasses.replace(hub.model_card("rul_attention.fd001"), output_names=[], calibration={})
    assert prediction_cells(torch.zeros(1, 3), unnamed, 3)[0] == ["output_0", "output_1", "output_2"]
    classifier = hub.model_card("vit_digits.sklearn")
    assert classifier.output_names == []
    assert prediction_cells(torch.zeros(1, 10), classifier, 2)[0] == ["class_1", "prob_1", "class_2", "prob_2"]


def test_cli_list_and_info(capsys):
    from hub.cli import main

    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "vit_digits" in out and "sklearn" in out and "test/acc" in out
    assert main(["info", "vit_digits.sklearn"]) == 0
    assert '"sha256"' in capsys.readouterr().out
    assert main(["info", "nonexistent_model"]) == 2
    assert "closest names" in capsys.readouterr().err
