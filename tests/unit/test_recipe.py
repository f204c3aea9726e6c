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


def test_a_recipe_is_edited_as_an_object_and_checked_whole():
    """Code edits a Recipe by its fields (a misnamed one raises at once); a bad value is caught with the whole recipe,
    naming the dotted key."""
    recipe = _check(BASE)
    edited = recipe.replace(trainer=recipe.trainer.replace(max_epochs=3), seed=2)
    assert (edited.trainer.max_epochs, edited.seed, recipe.trainer.max_epochs, recipe.seed) == (3, 2, 10, 0)
    with pytest.raises(RecipeError, match="TrainerSection has no field 'max_epoch'"):
        recipe.trainer.replace(max_epoch=3)
    with pytest.raises(RecipeError, match="'trainer.max_minutes'"):
        _check(recipe.replace(trainer=recipe.trainer.replace(max_minutes=0.0)).to_dict())


@pytest.mark.parametrize("family, recipe_file_name", [
    ("gatv2", "graph/gatv2_citeseer.yaml"),
    ("icu_gru", "medical/icu_gru_physionet2012.yaml"),
    ("rul_attention_gru", "timeseries/rul_attention_fd001.yaml"),  # the FD001 recipe, whatever the RUL family
    ("traffic_gru", "timeseries/traffic_gru_los_loop.yaml"),
])
def test_a_default_recipe_takes_the_numbers_of_the_recipe_file_it_shares(family, recipe_file_name):
    """One place for each number: the optimiser and schedule of a default recipe for user data are those of its
    recipe file; the recipe trains the family on one device of any accelerator, named finetune-FAMILY."""
    from hub.kinds import default_recipe
    from hub.recipe import recipe_file

    default, published = default_recipe(family, "mine"), recipe_file(recipe_file_name)
    assert (default.optimizer, default.scheduler) == (published.optimizer, published.scheduler)
    assert default.trainer.gradient_clip_val == published.trainer.gradient_clip_val
    assert (default.name, default.model.name, default.trainer.accelerator, default.trainer.devices) == (
        f"finetune-{family}", family, "auto", 1)
    assert published.trainer.accelerator == "cpu"  # what the file was measured on
