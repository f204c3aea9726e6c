"""Recipes are validated whole before anything runs, naming the dotted key."""
import pytest

from hub.errors import RecipeError
from hub.recipe import apply_overrides, load_recipe, parse_yaml, validate_recipe

BASE = {"model": {"name": "vit_digits"}, "data": {"name": "sklearn_digits"}}


def _check(data):
    return validate_recipe(data, "test recipe")


def test_quickstart_recipe_valid(repo):
    recipe = load_recipe(repo / "recipes" / "quickstart.yaml", ["trainer.max_epochs=2", "optimizer.lr=1e-3"])
    assert recipe.trainer.max_epochs == 2 and recipe.optimizer.lr == 1e-3 and recipe.name == "quickstart"


@pytest.mark.parametrize("override, key", [
    ("trainer.max_epoch=3", "trainer.max_epoch"),
    ("trainer.max_epochs=ten", "trainer.max_epochs"),
    ("optimizer.name=lbfgs", "optimizer.name"),
    ("model.args.depth=3", "model.args.depth"),
    ("model.args.drop_rate=high", "model.args.drop_rate"),
    ("data.args.batchsize=3", "data.args.batchsize"),
    ("seeds=3", "seeds"),
    ("trainer.loggers=[wandb_typo]", "trainer.loggers"),
])
def test_bad_keys_and_types_name_the_dotted_key(override, key):
    with pytest.raises(RecipeError) as err:
        _check(apply_overrides(BASE, [override]))
    assert f"'{key}'" in str(err.value)


def test_unknown_key_lists_allowed_keys():
    with pytest.raises(RecipeError, match="allowed keys.*max_epochs"):
        _check(apply_overrides(BASE, ["trainer.max_epoch=3"]))


def test_yaml_object_tag_refused_before_construction(tmp_path):
    marker = tmp_path / "ran"
    text = f"model:\n  name: vit_digits\n  args: !!python/object/apply:os.system ['touch {marker}']\n"
    with pytest.raises(RecipeError, match="'model.args'.*python/object/apply"):
        parse_yaml(text, "evil.yaml")
    assert not marker.exists()


def test_models_and_data_are_registry_names_not_import_paths():
    with pytest.raises(Exception, match="malformed model name"):
        _check({**BASE, "model": {"name": "torch.nn.Linear"}})
    with pytest.raises(Exception, match="unknown dataset"):
        _check({**BASE, "data": {"name": "torchvision.datasets.MNIST"}})


def test_bad_override_syntax():
    with pytest.raises(RecipeError, match="key.path=value"):
        apply_overrides(BASE, ["trainer.max_epochs"])
    with pytest.raises(RecipeError, match="is a value, not a section"):
        apply_overrides(BASE, ["model.name.x=1"])


def test_unknown_logger_lists_the_accepted_names():
    with pytest.raises(RecipeError, match=r"'trainer.loggers'.*'wandb_typo'.*\['csv', 'tensorboard', 'mlflow'\]"):
        _check(apply_overrides(BASE, ["trainer.loggers=[csv,wandb_typo]"]))
    assert _check(BASE).trainer.loggers == ["csv"]
