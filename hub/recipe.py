"""Recipes: plain-data YAML validated whole before anything runs.

A recipe names registry entries (``model.name``, ``data.name``), never import paths. Unknown keys,
wrong types and YAML tags that would construct Python objects fail with the dotted key. Model and
data arguments are checked against the signature of the registered builder.

Example::

    recipe = load_recipe("recipes/quickstart.yaml", ["trainer.max_epochs=5"])
    recipe.trainer.max_epochs  # 5

Code edits a :class:`Recipe` as an object: ``recipe.replace(trainer=recipe.trainer.replace(max_epochs=5))``; the
user's ``key=value`` overrides (:func:`apply_overrides`) apply to its dict last, and :func:`validate_recipe` checks
the whole. A kind's default recipe for user data (:func:`scratch_recipe`) starts from a recipe file of this checkout
(:func:`recipe_file`) where it shares that file's numbers, else from typed sections.
"""
from __future__ import annotations

import copy
import inspect
from pathlib import Path
from typing import Any, Literal, Self

import yaml
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from hub.errors import RecipeError

_SAFE_TAGS = {f"tag:yaml.org,2002:{t}" for t in ("str", "int", "float", "bool", "null", "map", "seq", "timestamp")}
# what `trainer.loggers` may name (hub.run.tracking): the run folder's metrics.csv, TensorBoard, MLflow
LOGGERS = ("csv", "tensorboard", "mlflow")
RECIPES_DIR = Path(__file__).resolve().parent.parent / "recipes"  # this checkout's recipe files (pip install -e .)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    def replace(self, **changes: Any) -> Self:
        """A copy with ``changes`` to its fields (a section given as its model); a name it lacks raises. The values
        are checked with the whole recipe (:func:`validate_recipe`), whose errors name the dotted key."""
        fields = type(self).model_fields
        unknown = sorted(set(changes) - set(fields))
        if unknown:
            raise RecipeError(f"{type(self).__name__} has no field {unknown[0]!r}; its fields: {sorted(fields)}")
        return self.model_copy(update=changes)


class ModelSection(_Strict):
    name: str
    args: dict[str, Any] = Field(default_factory=dict)
    init_from: str | None = None  # a pretrained tag or run folder whose weights start the training
    # train the classifier alone (the family's classifier prefix), the rest frozen: a linear probe
    freeze_backbone: bool = False
    # learnable memory tokens (hub.attention.memory_tokens): the init_from model frozen whole, answering its own task
    # as before, and this many tokens per block with a new class token and head trained for the data's task; None: off
    memory_tokens: int | None = Field(None, ge=1)


class DataSection(_Strict):
    name: str
    args: dict[str, Any] = Field(default_factory=dict)


class OptimizerSection(_Strict):
    name: Literal["adamw", "adam", "sgd"] = "adamw"
    lr: float = 1e-3
    weight_decay: float = 0.0
    momentum: float = 0.9
    betas: tuple[float, float] = (0.9, 0.999)
    # fine-tuning: the learning rate of every parameter outside the classifier is lr * backbone_lr_scale, and with
    # layer_decay (models with timm's group_matcher) a further layer_decay ** (layers above it), as in BEiT
    backbone_lr_scale: float = Field(1.0, gt=0.0, le=1.0)
    layer_decay: float | None = Field(None, gt=0.0, le=1.0)
    # the parameters of normalisation layers learn at lr * norm_lr_scale and, when it is not 1, are decayed at
    # weight_decay / norm_lr_scale (the same decay per step as the rest): airbench's bias_scaler (64)
    norm_lr_scale: float = Field(1.0, gt=0.0)


class SchedulerSection(_Strict):
    # after a linear warmup: cosine or linear ("linear": airbench's triangle) decay to min_lr_ratio, or steps
    name: Literal["none", "cosine", "linear", "step"] = "none"
    warmup_epochs: int | float = Field(0, ge=0)  # may be a fraction of the run's epochs' worth of steps
    warmup_start_ratio: float = Field(0.0, ge=0.0, le=1.0)  # the warmup's first factor (airbench: 0.2)
    step_size: int = 30
    gamma: float = 0.1
    min_lr_ratio: float = 0.0


class TaskSection(_Strict):
    # classification: cross-entropy against (1 - s) * one-hot + s * uniform in training (Szegedy et al. 2016)
    label_smoothing: float = Field(0.0, ge=0.0, lt=1.0)


class EarlyStoppingSection(_Strict):
    patience: int | None = None  # None: no early stopping
    min_delta: float = 0.0


class TrainerSection(_Strict):
    max_epochs: int = Field(10, ge=1)
    # early stopping ends no run before this many epochs (None: from the first); the time budget still may
    min_epochs: int | None = Field(None, ge=0)
    # the time budget of one call of train (None: no limit), checked at each epoch's end: no epoch starts once it
    # is spent; a resumed run (--resume) gets it afresh
    max_minutes: float | None = Field(None, gt=0.0)
    accelerator: Literal["auto", "cpu", "gpu", "cuda", "mps"] = "auto"
    devices: int | Literal["auto"] = "auto"
    num_nodes: int = 1
    strategy: Literal["auto", "ddp", "ddp_spawn", "ddp_find_unused_parameters_true", "fsdp"] = "auto"
    precision: Literal["32-true", "bf16-mixed", "16-mixed", "64-true"] = "32-true"
    gradient_clip_val: float | None = None
    accumulate_grad_batches: int = 1
    check_val_every_n_epoch: int = 1
    limit_train_batches: float | int = 1.0
    limit_val_batches: float | int = 1.0
    log_every_n_steps: int = 10
    deterministic: bool = False
    # torch's intra-op threads during the run (None: torch's default, one per core); 1 suits a model too small to
    # share out one operation, whose threads would only wait for each other on a CPU shared with other work
    num_threads: int | None = Field(None, ge=1)
    # default: the task's validation metric. A list applies the GAT paper's rule: patience counts epochs
    # where none reaches its best so far; the kept epoch is the last where all reached it together.
    monitor: str | list[str] | None = None
    test_checkpoint: Literal["best", "last"] = "best"  # which weights are tested and kept: best monitored epoch or last
    early_stopping: EarlyStoppingSection = Field(default_factory=EarlyStoppingSection)
    compile: bool = False
    channels_last: bool = False
    checkpoint_every_n_steps: int | None = None  # also write `last` inside an epoch
    # exponential moving average of the weights (decay per step); validation, checkpoints and the kept weights use it
    ema_decay: float | None = Field(None, gt=0.0, lt=1.0)
    lookahead: bool = False  # airbench's lookahead (hub.run.callbacks.Lookahead): every 5 steps, to a slow copy
    # experiment tracking (hub.run.tracking): `csv` is the run folder's metrics.csv, always written
    loggers: list[str] = Field(default_factory=lambda: ["csv"])
    mlflow_uri: str | None = None  # MLflow's tracking store; None: sqlite:///RUN_DIR/mlflow.db
    # at the end: a classifier's temperature, a regression's conformal intervals, fitted on the validation split
    # (hub.uncertainty.conformal), kept in the card (predict applies them) with their figures in metrics.json
    calibrate: bool = True

    @field_validator("loggers")
    @classmethod
    def _known_loggers(cls, names: list[str]) -> list[str]:
        unknown = [n for n in names if n not in LOGGERS]
        if unknown:
            raise ValueError(f"unknown logger {unknown[0]!r}; accepted names: {list(LOGGERS)}")
        if len(set(names)) != len(names):
            raise ValueError(f"a logger is named twice in {names}")
        return names


class Recipe(_Strict):
    name: str | None = None
    seed: int = 0
    output_dir: str = "runs"
    model: ModelSection
    data: DataSection
    optimizer: OptimizerSection = Field(default_factory=OptimizerSection)
    scheduler: SchedulerSection = Field(default_factory=SchedulerSection)
    task: TaskSection = Field(default_factory=TaskSection)
    trainer: TrainerSection = Field(default_factory=TrainerSection)

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def _section_fields(loc: tuple) -> list[str]:
    model: type[BaseModel] = Recipe
    for part in loc[:-1]:
        field = model.model_fields.get(part)
        annotation = getattr(field, "annotation", None)
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return []
        model = annotation
    return sorted(model.model_fields)


def _format_errors(err: ValidationError, source: str) -> str:
    lines = []
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"])
        if e["type"] == "extra_forbidden":
            lines.append(f"unknown key '{key}'; allowed keys here: {_section_fields(e['loc'])}")
        elif e["type"] == "missing":
            lines.append(f"missing key '{key}'")
        else:
            lines.append(f"key '{key}': {e['msg']} (got {e.get('input')!r})")
    return f"invalid recipe {source}:\n  " + "\n  ".join(lines)


def _find_unsafe_tag(node: yaml.Node, path: str = "") -> tuple[str, str] | None:
    if node.tag not in _SAFE_TAGS:
        return path or "<root>", node.tag
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            found = _find_unsafe_tag(key, path) or _find_unsafe_tag(value, f"{path}.{key.value}".lstrip("."))
            if found:
                return found
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            found = _find_unsafe_tag(item, f"{path}.{i}".lstrip("."))
            if found:
                return found
    return None


def parse_yaml(text: str, source: str) -> dict[str, Any]:
    """``yaml.safe_load`` with an error naming the dotted key of any tag that would build an object."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)  # builds no objects
    except yaml.YAMLError as err:
        raise RecipeError(f"{source} is not valid YAML: {err}") from err
    if node is not None and (found := _find_unsafe_tag(node)):
        raise RecipeError(f"{source}: key '{found[0]}' uses the YAML tag {found[1]}; recipes hold plain data "
                          "and never construct Python objects")
    data = yaml.safe_load(text)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise RecipeError(f"{source}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply CLI overrides ``a.b=c`` (values parsed as YAML) to a recipe dict."""
    data = copy.deepcopy(data)
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise RecipeError(f"override {item!r} must look like key.path=value")
        value = parse_yaml(f"v: {raw}" if raw.strip() else "v: null", f"override {item!r}")["v"]
        parts = key.split(".")
        node = data
        for i, part in enumerate(parts[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise RecipeError(f"override {item!r}: '{'.'.join(parts[:i + 1])}' is a value, not a section")
            node = child
        node[parts[-1]] = value
    return data


def check_builder_args(builder, args: dict[str, Any], section: str, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """Validate ``args`` against the builder's signature: unknown names and wrong types name the key."""
    params = {n: p for n, p in inspect.signature(builder).parameters.items()
              if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and n not in skip}
    unknown = sorted(set(args) - set(params))
    if unknown:
        raise RecipeError(f"unknown key '{section}.{unknown[0]}' for {builder.__name__}; "
                          f"allowed keys: {sorted(params)}")
    out = {}
    for name, value in args.items():
        annotation = params[name].annotation
        if annotation is inspect.Parameter.empty:
            out[name] = value
            continue
        try:
            out[name] = TypeAdapter(annotation).validate_python(value)
        except ValidationError as err:
            raise RecipeError(f"key '{section}.{name}': expected {annotation}, got {value!r} "
                              f"({err.errors()[0]['msg']})") from None
    return out


def recipe_from_dict(data: dict[str, Any], source: str = "recipe") -> Recipe:
    """A recipe dict as a :class:`Recipe`, checked against the schema alone (not the registered builders'
    arguments): unknown keys and wrong types raise naming the dotted key."""
    try:
        return Recipe.model_validate(data)
    except ValidationError as err:
        raise RecipeError(_format_errors(err, source)) from None


def validate_recipe(data: dict[str, Any], source: str = "recipe") -> Recipe:
    """Validate a recipe dict whole: the schema, then the registered model and data arguments."""
    from hub.core.registry import get_dataset_entry, get_model_entry

    recipe = recipe_from_dict(data, source)
    model_entry = get_model_entry(recipe.model.name)
    data_entry = get_dataset_entry(recipe.data.name)
    model_args = check_builder_args(model_entry.builder, recipe.model.args, "model.args")
    data_args = check_builder_args(data_entry.builder, recipe.data.args, "data.args")
    return recipe.model_copy(update={
        "model": recipe.model.model_copy(update={"args": model_args}),
        "data": recipe.data.model_copy(update={"args": data_args}),
    })


def card_data(card, data_overrides: list[str] | None = None):
    """The set-up data module named by a model card (its dataset, arguments and split); ``data_overrides`` are
    ``key=value`` strings under ``data.``. A run folder's card takes the data section of the run's own
    ``recipe.yaml``, which keeps the data path as given (the card holds it portable, :mod:`hub.core.cards`)."""
    from hub.core.registry import get_dataset_entry

    run_recipe = Path(card.card_dir) / "recipe.yaml" if card.card_dir else None
    section = parse_yaml(run_recipe.read_text(), str(run_recipe))["data"] if run_recipe and run_recipe.is_file() \
        else {"name": card.data["name"], "args": card.data.get("args", {})}
    data = apply_overrides({"data": section}, data_overrides or [])["data"]
    entry = get_dataset_entry(data["name"])
    datamodule = entry.builder(**check_builder_args(entry.builder, data["args"], "data.args"))
    datamodule.setup("test")
    return datamodule


def load_recipe(path: str | Path, overrides: list[str] | None = None) -> Recipe:
    path = Path(path)
    if not path.is_file():
        raise RecipeError(f"recipe file {path} does not exist")
    data = apply_overrides(parse_yaml(path.read_text(), str(path)), overrides or [])
    data.setdefault("name", path.stem)
    return validate_recipe(data, str(path))


def recipe_file(relative: str) -> Recipe:
    """The recipe file ``recipes/RELATIVE`` of this checkout (e.g. ``graph/gat_citeseer.yaml``), validated."""
    return load_recipe(RECIPES_DIR / relative)


def scratch_recipe(family: str, data: DataSection, model_args: dict[str, Any] | None = None,
                   start: Recipe | None = None, **sections: BaseModel) -> Recipe:
    """The recipe training the untrained ``family`` on a user's ``data``, named ``finetune-FAMILY``: the sections
    of ``start`` (a recipe file that shares the kind's numbers, :func:`recipe_file`), else the schema's defaults,
    replaced by ``sections`` (``optimizer=``, ``trainer=``, ...), on one device of whatever accelerator there is
    (a recipe file names the one it was measured on).

    Args:
        family: the model family trained from scratch.
        data: the data section reading the user's data.
        model_args: the family's arguments; None: those of ``start``, else none (the family's defaults).
        start: the recipe whose other sections the recipe keeps (None: the schema's defaults).
        **sections: sections that replace those of ``start``, as their models.
    """
    base = start if start is not None else Recipe(model=ModelSection(name=family), data=data)
    recipe = base.replace(name=f"finetune-{family}", data=data, **sections,
                          model=ModelSection(name=family, args=dict(base.model.args if model_args is None
                                                                    else model_args)))
    return recipe.replace(trainer=recipe.trainer.replace(accelerator="auto", devices=1))
