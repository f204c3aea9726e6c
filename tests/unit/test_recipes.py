"""Every recipe in recipes/ validates: known keys, right types, registered model and data names."""
from pathlib import Path

import pytest

from hub.recipe import load_recipe

RECIPES = sorted((Path(__file__).resolve().parents[2] / "recipes").rglob("*.yaml"))


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: str(p.relative_to(p.parents[1])))
def test_recipe_validates(path):
    recipe = load_recipe(path)
    assert recipe.trainer.max_epochs >= 1
