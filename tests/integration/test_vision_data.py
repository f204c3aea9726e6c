"""Vision families: shapes, gradients to every parameter, head reset, tiny overfit, input checks, maps."""
import pytest

import hub


def test_breastmnist_and_cifar10_load_from_the_data_dir():
    from hub.core.registry import get_dataset_entry

    breast = get_dataset_entry("breastmnist").builder(img_size=32, channels=3, mean=[0.5] * 3, std=[0.5] * 3)
    breast.setup()
    assert breast.info["sizes"] == [546, 78, 156] and breast.train_set[0][0].shape == (3, 32, 32)
    cifar = get_dataset_entry("cifar10").builder(num_workers=0, train_subset=100)
    cifar.setup()
    assert cifar.info["sizes"] == [100, 2000, 10000] and cifar.label_names[0] == "airplane"


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in hub.list_models(pretrained=True) if n.endswith(".cifar10")])
def test_shipped_cifar10_weights_reproduce_their_cards(name):
    """The shipped CIFAR-10 classifiers score on the full 10k test set what their cards say."""
    from hub.run.evaluate import evaluate

    card = hub.model_card(name)
    measured = evaluate(name, progress=False)
    assert measured["test/acc"] == pytest.approx(card.metrics["test/acc"]["values"][0], abs=1e-4)
    assert card.label_names[:2] == ["airplane", "automobile"]


def test_shipped_slot_weights_reproduce_their_card():
    """``evaluate`` of the shipped Slot Attention tag on its generated test scenes gives the card's FG-ARI."""
    from hub.run.evaluate import evaluate

    card = hub.model_card("slot_autoencoder_micro_64.shapes")
    measured = evaluate("slot_autoencoder_micro_64.shapes", progress=False)
    assert measured["test/fg_ari"] == pytest.approx(card.metrics["test/fg_ari"]["values"][0], abs=1e-4)
