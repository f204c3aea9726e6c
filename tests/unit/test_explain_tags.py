"""Every shipped tag explains itself (issue 71): for ``hub.list_models(pretrained=True)``, one seeded input per tag is
explained through the kind (``write_explanation``: the figure, the map's numbers, the JSON record) and passes the
model randomisation test of Adebayo et al. (NeurIPS 2018): the maps of three inputs, drawn for the trained model and
for a copy with random weights (:func:`hub.explain.randomized_copy`), must not be NaN or constant, and their mean
Spearman rank correlation must stay at or below :data:`RANK_THRESHOLD`. A new tag whose family has no explanation
fails here, named. Inputs are generated (no dataset), so this runs in the unit layer: about 40 s for the 30 tags
on one CPU core."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import hub
from hub.errors import DataError
from hub.explain import randomized_copy, sanity_failure
from hub.kinds import kind_of, write_explanation

RANK_THRESHOLD = 0.5  # above it, the map depends on the input more than on what the model learned
INPUTS = 3  # inputs per tag in the randomisation test (one correlation of a coarse map is noisy)


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("tag", hub.list_models(pretrained=True))
def test_every_shipped_tag_explains_itself_and_passes_the_randomisation_test(tag, tmp_path):
    model = hub.load(tag).eval()
    card = model.pretrained_cfg
    kind = kind_of(card)
    examples = [kind.explanation_example(card, torch.Generator().manual_seed(seed)) for seed in range(INPUTS)]
    try:
        path = write_explanation(kind, card, model, examples[0], tmp_path / "example_explain.png", "example")
    except DataError as error:
        pytest.fail(f"{tag} (family {card.family}) has no explanation: {error}")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 2000, f"{tag}: no figure"
    values = np.load(path.with_suffix(".npy"))
    record = json.loads(path.with_suffix(".json").read_text())
    assert np.isfinite(values).all() and values.size > 1, f"{tag}: the map's numbers"
    assert record["family"] == card.family and record["input"] == "example" and record["method"]
    assert list(values.shape) == record["shape"]
    if card.label_names:
        assert 0 <= record["target"] < len(card.label_names) and 0 < record["probability"] <= 1
    trained = [kind.explanation(card, model, x).values for x in examples]
    np.testing.assert_allclose(trained[0], values, rtol=1e-5, atol=1e-6)  # the file holds the map
    random_model = randomized_copy(model)
    randomized = [kind.explanation(card, random_model, x).values for x in examples]
    failure = sanity_failure(trained, randomized, RANK_THRESHOLD)
    assert failure is None, f"{tag} ({record['method']}): {failure}"
