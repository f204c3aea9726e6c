"""Audio: AST/SSAST/timbre shapes, gradients, overfit, DeiT adaptation; fbank pipeline; bad audio; data; weights."""
import pytest
import torch

import hub
from hub.errors import DataError


def test_fsdd_split_holds_one_speaker_out():
    from hub.core.registry import get_dataset_entry

    data = get_dataset_entry("fsdd").builder(test_speaker="lucas", label_fraction=0.1, target_frames=64)
    data.setup()
    assert data.info["sizes"] == [225, 250, 500] and data.label_names == [str(d) for d in range(10)]
    assert data.input_spec["target_frames"] == 64 and data.test_set.tensors[0].shape == (500, 128, 64)
    labels = data.train_set.labels
    assert torch.bincount(labels).tolist() == [22] * 5 + [23] * 5 or torch.bincount(labels).min() >= 20
    with pytest.raises(DataError, match="unknown FSDD speaker 'bob'"):
        get_dataset_entry("fsdd").builder(test_speaker="bob")


def test_fsdd_digits_keeps_those_digits_in_every_split_labelled_in_list_order():
    """``digits=[7, 2]``: only sevens and twos, label 0 the sevens, theo's 100 clips of them the test set."""
    from hub.core.registry import get_dataset_entry

    data = get_dataset_entry("fsdd").builder(digits=[7, 2])
    splits, classes = data.split_items()  # files and labels only: no spectrogram is computed
    assert classes == ["7", "2"]
    assert [len(splits[s]) for s in ("train", "val", "test")] == [450, 50, 100]
    for name, items in splits.items():
        assert all(path.name.split("_")[0] == classes[label] for path, label in items), name
        assert sorted({label for _, label in items}) == [0, 1]
    assert all(path.name.split("_")[1] == "theo" for path, _ in splits["test"])
    assert not any(path.name.split("_")[1] == "theo" for path, _ in splits["train"] + splits["val"])


@pytest.mark.parametrize("name", hub.list_models(domain="audio", pretrained=True))
def test_shipped_weights_reproduce_their_card(name):
    """Every shipped audio tag loads (sha256 checked) and scores its first seed's test accuracy on FSDD."""
    from hub.core.registry import get_dataset_entry

    model = hub.load(name)
    card = model.pretrained_cfg
    data = get_dataset_entry(card.data["name"]).builder(**card.data["args"])
    data.setup()
    x, y = data.test_set.tensors
    if data.task == "masked-patch-modelling":
        assert model(x[:2]).shape[0] == 2
        return
    with torch.no_grad():
        acc = float((torch.cat([model(b).argmax(-1) for b in x.split(100)]) == y).float().mean())
    assert acc == pytest.approx(card.metrics["test/acc"]["values"][0], abs=2e-3)
