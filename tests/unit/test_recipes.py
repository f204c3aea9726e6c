"""Every recipe in recipes/ validates (known keys, right types, registered model and data names) and its schedule
holds together."""
from pathlib import Path

import pytest

from hub.recipe import load_recipe

RECIPES = sorted((Path(__file__).resolve().parents[2] / "recipes").rglob("*.yaml"))


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: str(p.relative_to(p.parents[1])))
def test_recipe_validates(path):
    recipe = load_recipe(path)
    trainer = recipe.trainer
    # the schema checks types and ranges; these hold between keys. A warmup as long as the run never reaches the
    # peak learning rate; a run that validates every n epochs must validate its last, whose validation metric is
    # the tested weights' (metrics.json's "validation", what a fine-tune policy is chosen on)
    assert recipe.scheduler.warmup_epochs < trainer.max_epochs
    assert trainer.max_epochs % trainer.check_val_every_n_epoch == 0, (trainer.max_epochs,
                                                                      trainer.check_val_every_n_epoch)
    assert trainer.min_epochs is None or trainer.min_epochs <= trainer.max_epochs
