"""Weights: sha256 at every load, named key errors, head reset, safe checkpoints, downloads, offline."""
import dataclasses
import json
import logging
import re
import socket
from pathlib import Path

import pytest
import torch

import hub
from hub.core.cards import absolute_paths, read_card, write_card
from hub.core.weights import apply_state_dict, load_state_dict, save_state_dict
from hub.errors import OfflineError, WeightsError
from hub.models import load_from_card
from hub.run.callbacks import AtomicCheckpointIO


def _card_copy(tmp_path: Path, **changes):
    """Copy the shipped quickstart card and weights into tmp_path, optionally changing card fields."""
    card = hub.model_card("vit_digits.sklearn")
    data = card.local_file.read_bytes()
    (tmp_path / card.file).write_bytes(data)
    new = dataclasses.replace(card, **changes)
    write_card(new, tmp_path / "card.json")
    return read_card(tmp_path / "card.json"), tmp_path / card.file


def test_shipped_weights_load_and_predict():
    model = hub.load("vit_digits.sklearn")
    assert not model.training
    assert model(torch.zeros(3, 1, 8, 8)).shape == (3, 10)


def test_absolute_paths_finds_every_form_and_names_the_key():
    card = {"a": "/tmp/run", "b": ["runs", {"c": "C:\\Users\\me"}], "d": "x (/work/shared/data/fsdd)",
            "e": "~/data", "f": "recipes/quickstart.yaml", "g": "val/acc", "h": "HUB_DATA_DIR/adult", "i": 3.0}
    assert absolute_paths(card) == [("a", "/tmp/run"), ("b[1].c", "C:\\Users\\me"),
                                    ("d", "x (/work/shared/data/fsdd)"), ("e", "~/data")]


def test_shipped_cards_hold_no_machine_paths(repo):
    """Every string of every shipped card (recipe, data source, notes, ...) is free of absolute paths, and the
    recipe names its file relative to the repository with no output folder."""
    cards = sorted(repo.glob("*/pretrained/*.json"))
    assert len(cards) >= 20
    found = [f"{path.relative_to(repo)}: {key} = {value!r}" for path in cards
             for key, value in absolute_paths(json.loads(path.read_text()))]
    assert not found, "shipped cards hold machine paths:\n" + "\n".join(found)
    for path in cards:
        recipe = read_card(path).recipe
        assert "output_dir" not in recipe["resolved"], path
        assert (repo / recipe["path"]).is_file() and isinstance(recipe["overrides"], list), path


def test_one_byte_change_refused_even_after_clean_load(tmp_path):
    card, path = _card_copy(tmp_path)
    load_from_card(card)  # a clean load first
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(WeightsError) as err:
        load_from_card(card)
    message = str(err.value)
    assert str(path) in message and card.sha256 in message
    assert re.search(r"got [0-9a-f]{64}", message)


def test_missing_unexpected_and_misshaped_keys_named():
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    state = {k: v.clone() for k, v in model.state_dict().items()}
    del state["1.bias"]
    state["extra.weight"] = torch.zeros(1)
    state["0.weight"] = torch.zeros(5, 4)
    with pytest.raises(WeightsError) as err:
        apply_state_dict(model, state)
    message = str(err.value)
    assert "missing keys ['1.bias']" in message
    assert "unexpected keys ['extra.weight']" in message
    assert "0.weight: model (3, 4) vs file (5, 4)" in message


def test_new_num_classes_reinitialises_only_the_head(caplog):
    pretrained = hub.load("vit_digits.sklearn")
    with caplog.at_level(logging.WARNING, logger="hub"):
        model = hub.load("vit_digits.sklearn", num_classes=3)
    assert "re-initialised for 3 classes" in caplog.text
    assert model.head.weight.shape == (3, 64)
    for key, value in pretrained.state_dict().items():
        if not key.startswith("head."):
            assert torch.equal(value, model.state_dict()[key]), key


def test_safetensors_roundtrip(tmp_path):
    state = {"a": torch.randn(3, 4), "b": torch.arange(5)}
    sha = save_state_dict(state, tmp_path / "w.safetensors")
    loaded = load_state_dict(tmp_path / "w.safetensors", sha)
    assert torch.equal(loaded["a"], state["a"]) and torch.equal(loaded["b"], state["b"])
    assert not list(tmp_path.glob(".*tmp"))


def test_shared_tensors_are_saved_under_every_name(tmp_path):
    """timm's CoaT reuses modules under several names; its weights save and load back strictly."""
    model = hub.create_model("coat_lite_micro_32", num_classes=3)
    state = model.state_dict()
    assert len({v.untyped_storage().data_ptr() for v in state.values()}) < len(state)  # the aliases exist
    sha = save_state_dict(state, tmp_path / "coat.safetensors")
    loaded = load_state_dict(tmp_path / "coat.safetensors", sha)
    fresh = hub.create_model("coat_lite_micro_32", num_classes=3)
    apply_state_dict(fresh, loaded)
    x = torch.randn(2, 3, 32, 32)
    assert torch.allclose(fresh.eval()(x), model.eval()(x))


class _Payload:
    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (Path(self.marker),))


def test_pickle_payload_refused_without_running(tmp_path):
    marker = tmp_path / "payload_ran"
    ckpt = tmp_path / "evil.ckpt"
    torch.save({"state_dict": {}, "x": _Payload(str(marker))}, ckpt)
    with pytest.raises(Exception, match="(?i)weights.only|unpickl"):
        AtomicCheckpointIO().load_checkpoint(ckpt)
    assert not marker.exists()


def test_every_torch_load_passes_weights_only_true(repo):
    offenders = []
    for path in repo.rglob("*.py"):
        if ".venv" in path.parts or "tests" in path.parts:
            continue
        text = path.read_text()
        for match in re.finditer(r"torch\.load\(([^)]*)\)", text):
            if "weights_only=True" not in match.group(1):
                offenders.append(f"{path}: {match.group(0)}")
    assert not offenders, offenders


# --- downloads against a local HTTP server --------------------------------------------------------

def _url_card(tmp_path, url):
    card = hub.model_card("vit_digits.sklearn")
    write_card(dataclasses.replace(card, file=None, url=url), tmp_path / "card.json")
    return read_card(tmp_path / "card.json")


def _cache_files(tmp_path):
    return [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]


def test_download_then_offline_warm_cache_opens_no_socket(tmp_path, server, monkeypatch):
    _, _, url = server
    card = _url_card(tmp_path, url)
    load_from_card(card)
    assert [p.name for p in _cache_files(tmp_path)] == ["vit_digits.sklearn.safetensors"]
    monkeypatch.setenv("HUB_OFFLINE", "1")

    def no_socket(*args, **kwargs):
        raise AssertionError("a socket was opened in offline mode")

    monkeypatch.setattr(socket, "socket", no_socket)
    load_from_card(card)


def test_offline_cold_cache_raises(tmp_path, server, monkeypatch):
    _, _, url = server
    monkeypatch.setenv("HUB_OFFLINE", "1")
    with pytest.raises(OfflineError, match="HUB_OFFLINE=1"):
        load_from_card(_url_card(tmp_path, url))


def test_short_download_leaves_nothing_and_names_url_and_bytes(tmp_path, server):
    _, handler, url = server
    handler.truncate_to = 1000
    with pytest.raises(WeightsError) as err:
        load_from_card(_url_card(tmp_path, url))
    assert url in str(err.value) and "1000" in str(err.value)
    assert _cache_files(tmp_path) == []


def _load_in_process(card_path: str, cache: str, queue):
    import os

    os.environ["HUB_CACHE"] = cache
    try:
        load_from_card(read_card(card_path))
        queue.put("ok")
    except Exception as err:  # reported to the parent
        queue.put(repr(err))


def test_timm_names(monkeypatch):
    model = hub.load("timm/resnet18", pretrained=False, num_classes=5).eval()
    assert model(torch.zeros(1, 3, 32, 32)).shape == (1, 5)
    monkeypatch.setenv("HUB_OFFLINE", "1")
    with pytest.raises(OfflineError, match="cache"):
        hub.load("timm/resnet18", pretrained=True)
    with pytest.raises(hub.UnknownModelError, match="resnet18"):
        hub.load("timm/resnet18x", pretrained=False)


def test_dataset_downloads_go_to_the_cache_not_to_the_data_dir(tmp_path, monkeypatch):
    """HUB_DATA_DIR may be a read-only shared folder of local copies: a download is looked for (and would be
    written) under HUB_CACHE."""
    from audio.data import FSDD_COMMIT, find_fsdd
    from hub.errors import DatasetUnavailable
    from vision.data import cifar10

    monkeypatch.setenv("HUB_DATA_DIR", str(tmp_path / "shared"))
    monkeypatch.setenv("HUB_OFFLINE", "1")
    cache = tmp_path / "cache" / "data"
    with pytest.raises(DatasetUnavailable, match=re.escape(str(cache / "cifar10-python"))):
        cifar10(batch_size=8, num_workers=0, augment=False).setup()
    fsdd_cache = cache / f"fsdd-{FSDD_COMMIT[:7]}" / "recordings"
    fsdd_cache.mkdir(parents=True)
    assert find_fsdd() == fsdd_cache.parent
