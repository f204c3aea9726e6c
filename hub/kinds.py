"""Input kinds: what a model takes from the user, named by its card's ``input_spec["kind"]``.

Each kind is one class, registered with :func:`register_kind` by the domain that reads it (in
``<domain>/kinds.py``): its ``Spec`` (a dataclass of the ``input_spec`` fields it reads, checked by
``Spec.from_card``) and the operations it supports:

- ``finetune_data(card, path, **options)`` turns ``--data PATH`` into a recipe ``data`` section, a
  :class:`~hub.recipe.DataSection` (an image folder, a CSV table, a folder of WAV files, ...);
- ``predict(card, model, paths, batch_size)`` runs the model over input files (or a folder), streaming in
  batches, and yields ``(names, outputs)``; a file that does not fit raises a clear error naming it;
- ``read_bytes(card, data, name)`` reads one uploaded file's bytes as ``predict`` reads the file, for ``serve``
  without a temporary file (kinds of one input per file; optional);
- ``transform(card)`` gives the preprocessing the card's weights expect (:func:`hub.transforms`): a callable from one
  input in its public raw form (an image, a WAV file, a table's rows, PyG's ``Planetoid`` graph, ...) to the model's
  input;
- ``explanation(card, model, inputs, target)`` says what decided the output for one input (a
  :class:`~hub.explain.Explanation`: the map, the method, the class and its probability), ``explain_samples(card,
  inputs[, data])`` turns what the user names (image or audio files, node ids, row or unit numbers; default: a sample
  of the card's test data) into model inputs, ``draw_explanation`` draws the figure; ``explain`` writes each as
  X.png, X.npy and X.json (:func:`write_explanation`) and yields the figures' paths;
- ``baseline(run_dir)`` scores a classical model on the split of a finished run, as a :class:`BaselineResult`, for
  the comparison that ``finetune`` prints and keeps (e.g. HistGradientBoosting next to a tabular model), or None;
  with its :class:`PredictorData` (validation and test outputs of the model and the baseline, and how to save the
  fitted baseline), ``finetune`` chooses the run's predictor among model, baseline and blend (:mod:`hub.predictor`);
- ``cross_validation(run_dir)``, on a kind whose data can be folded (graph folders, tables, survival tables), gives
  the :class:`CrossValidation` from which ``finetune`` chooses the predictor by k folds on small data and refits it
  on every labelled item (:mod:`hub.crossval`); None (the default): the choice on the validation split;
- ``baseline_outputs(card, path)`` gives the saved baseline's outputs for the inputs at ``path``, for ``predict``
  when the card's predictor is the baseline or a blend; a kind with no baseline predictor (the default) raises;
  ``blend_outputs(card, weight, model, baseline)`` mixes them with the model's (default: linearly; survival tables
  average rank-normalised risks);
- ``default_recipe(family, path, **options)``, on the kind that the families of the tasks in its ``tasks`` read,
  lets ``attnhub finetune FAMILY --data PATH`` train such a family from scratch, with no pretrained tag (e.g.
  ``tabr`` on a CSV never seen before): a :class:`~hub.recipe.Recipe` (:func:`hub.recipe.scratch_recipe`), from the
  recipe file whose numbers it shares, else from the kind's typed sections.
- ``example_input(card, size, generator)`` gives seeded inputs of the card's shapes, which export traces
  (:mod:`hub.deploy.exporter`); ``input_spec_of(model)`` the ``input_spec`` of an untrained model of the kind's domain
  from what the model says of its input (an audio model's ``input_size``), or None.

What a kind declares as data, read by the core through the kind and never by its name:

- ``ood``: an :class:`OODProfile`, the out-of-distribution scores its inputs get (:mod:`hub.uncertainty.ood`), with
  the hooks ``ood_values(inputs)`` (the model's input as numbers, for the range check) and
  ``ood_rows(frame, card_spec)`` (a table's raw rows as numbers, where the profile reads ``rows``);
- ``input_form``: an :class:`InputForm`, how ``predict`` and ``serve`` take its inputs (files, one prediction per
  file, a folder, the rows of a table) and so whether ``serve`` batches requests into one model call;
- ``options``: the keyword options (:class:`KindOption`) of its ``finetune_data`` and ``default_recipe``
  (``--target``, ``--time``, ...), which ``attnhub finetune`` lists with their help.

An operation a kind does not support raises :class:`DataError` naming the kind and the operation.

>>> @dataclass(frozen=True)
... class PointsSpec(KindSpec):
...     dim: int
>>> PointsSpec.from_dict({"kind": "points", "dim": 3}, "a card").dim
3
"""
from __future__ import annotations

import dataclasses
import enum
import inspect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Iterable, Iterator

from hub.core.registry import Registry, get_model_entry, import_domains, import_family_part
from hub.errors import DataError
from hub.explain import Explanation
from hub.recipe import DataSection, Recipe


@dataclass(frozen=True)
class KindSpec:
    """The ``input_spec`` fields a kind reads, as a dataclass; other fields of the card's spec are ignored."""

    @classmethod
    def from_dict(cls, spec: dict[str, Any], where: str) -> KindSpec:
        """The typed spec of the ``input_spec`` dict of ``where`` (a card); a missing field raises naming it."""
        wanted = dataclasses.fields(cls)
        missing = [f.name for f in wanted if f.name not in spec
                   and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        if missing:
            raise DataError(f"the input_spec of {where} (kind {spec.get('kind')!r}) lacks the field(s) "
                            f"{', '.join(missing)}; that kind needs {', '.join(f.name for f in wanted)}")
        return cls(**{f.name: spec[f.name] for f in wanted if f.name in spec})

    @classmethod
    def from_card(cls, card) -> KindSpec:
        return cls.from_dict(card.input_spec, f"the card of {card.name}")


@dataclass(frozen=True)
class PredictorData:
    """What choosing a run's predictor needs (:mod:`hub.predictor`), from a kind whose baseline can predict.

    ``task``: ``classification`` (outputs: (N, C) probabilities, the model's calibrated as ``predict`` gives them;
    labels: class indices), ``regression`` (outputs and labels: values, in the units the run's metrics use, NaN
    for a label the run's metrics leave out, a missing reading: scored and fitted without it) or
    ``survival`` (outputs: (N,) risks in the space they are blended in, as ``blend_outputs`` maps them; labels:
    (N, 2) time and event);
    ``labels``, ``model`` and ``baseline`` map ``val`` and ``test`` to the split's labels and each member's outputs;
    ``save(run_dir)`` writes the fitted baseline into the run folder without pickle and returns the file's path;
    ``outputs``, for a regression whose model has more named outputs than the one the choice is made on (a RUL
    forecast's horizon): ``{"labels", "model", "baseline"}``, each mapping ``val`` and ``test`` to (N, K) values of
    every output, from which a baseline or blend predictor's intervals are fitted (None: ``labels``, ``model`` and
    ``baseline`` are every output, (N, K) or (N, K, ...) with the further axes, a forecast's sensors, as more
    rows); ``shift``: held-out near-shift evidence built from the training data (``labels``, ``model``,
    ``baseline``: the outputs the choice is made on, for validation items shifted as ``how`` says, e.g. perturbed
    sensors), from which the member answering the rows ``predict`` flags out of distribution is chosen
    (:func:`hub.predictor.guard_entry`; None: flagged rows keep the chosen predictor)."""

    task: str
    labels: dict[str, Any]
    model: dict[str, Any]
    baseline: dict[str, Any]
    save: Callable[[Path], Path]
    outputs: dict[str, dict[str, Any]] | None = None
    shift: dict[str, Any] | None = None


@dataclass(frozen=True)
class BaselineResult:
    """A classical baseline scored on the test split of a run.

    ``metrics`` uses the run's own metric names (``test/acc``, ``test/rmse``, ``test/c_index`` ...), the one to
    compare the model on first; ``predictions`` holds the baseline's test-split outputs, one list per column in
    the order of the test split (an id column first where the split has ids), which ``finetune`` writes to the
    run's ``baseline_predictions.csv`` so that a user can keep the better of the two. ``predictor``, from a kind
    whose baseline can predict, lets ``finetune`` choose among model, baseline and blend (None: the model)."""

    name: str
    metrics: dict[str, float]
    predictions: dict[str, list] = field(default_factory=dict)
    predictor: PredictorData | None = None


@dataclass(frozen=True)
class CrossValidation:
    """What ``finetune``'s cross-validated choice (:mod:`hub.crossval`) needs from a kind, on a finished run's data:
    the items it folds (the labelled items outside the test split), how a run trains on the other folds or on every
    labelled item, and the kind's baselines out of fold.

    ``task``, ``labels`` ((N,) or (N, 2) of the folded items, in their order) and ``label_names`` as for
    :func:`hub.crossval.fold_indices`; ``groups``: each folded item's group (unit, recording, speaker, patient),
    or None; ``fold_overrides(k, index, seed)``: recipe overrides that train on the other folds of
    :func:`~hub.crossval.fold_indices` (the same ``k`` and ``seed``) and validate on fold ``index``;
    ``refit_overrides``: those that train on every labelled item, test included; ``fold_outputs(run_dir)``: a fold
    run's model outputs on its validation items, in fold order (as :class:`PredictorData`'s); ``baselines(folds,
    seed)``: each baseline's out-of-fold outputs by name; ``test(baseline)``: ``(labels, model, baseline)`` on the
    test split, the model's from the run and the named baseline fitted on the folded items (None: no test split);
    ``refit(baseline, run_dir)``: the named baseline fitted on every labelled item, saved into ``run_dir`` (the
    file's path); ``near_shift(fold_runs, folds, seed, baseline)`` (optional): held-out near-shift evidence out of
    fold, as :class:`PredictorData`'s ``shift`` (``labels``, ``model``, ``baseline``, ``how``; each fold run's model
    and the named baseline fitted without the fold, on its fold's items shifted), from which the choice's guard is
    chosen (:func:`hub.predictor.guard_entry`)."""

    task: str
    labels: Any
    label_names: list[str] | None
    groups: Any | None
    fold_overrides: Callable[[int, int, int], list[str]]
    refit_overrides: list[str]
    fold_outputs: Callable[[Path], Any]
    baselines: Callable[[Any, int], dict[str, Any]]
    test: Callable[[str], tuple[Any, Any, Any]] | None
    refit: Callable[[str, Path], Path]
    near_shift: Callable[[list[Path], Any, int, str], dict[str, Any]] | None = None


@dataclass(frozen=True)
class OODProfile:
    """The out-of-distribution scores a kind's inputs get (:mod:`hub.uncertainty.ood`, whose module docstring says
    what each measures). The default: the model's own score alone (Mahalanobis of its penultimate features, else the
    energy of a classifier's logits)."""

    input_scores: tuple[str, ...] = ()  # scores of the input added to the model's: range, inputs, grey_energy, ...
    reconstruction: bool = False  # an autoencoder (its output rebuilds its input): scored by the reconstruction error
    graph_nodes: bool = False  # node classification on one graph whose masks name the splits: logits' energy
    rows: bool = False  # the range check reads a table's raw rows (``ood_rows``), not the model's input
    range_dims: int = 1  # trailing dimensions of the values with a range of their own (2: per sensor and channel)
    never_empty: bool = False  # an empty value (NaN) where training had none is unseen (a survival table's gene)
    summary: Callable[[Any, dict[str, Any]], Any] | None = None  # the ``inputs`` score's (B, ...) -> (B, S) summary


class InputForm(enum.Enum):
    """How ``predict`` and ``serve`` take a kind's inputs (:mod:`hub.deploy.predict`, :mod:`hub.deploy.serve`)."""

    FILES = enum.auto()  # input files, each request's read on its own (its reader infers a file's columns from it)
    FILE_EACH = enum.auto()  # one prediction per file, named by its path: serve batches requests into one model call
    FOLDER = enum.auto()  # the files of a request form one input, a folder (a graph's nodes.csv and edges.csv)
    ROWS = enum.auto()  # the rows of a table: ``predict --data TABLE.csv``, serve's JSON body ``{"rows": [...]}``


@dataclass(frozen=True)
class KindOption:
    """A keyword option of a kind's ``finetune_data`` and ``default_recipe``, given as ``attnhub finetune --NAME``."""

    name: str  # the keyword, and the flag (underscores as dashes)
    help: str  # the flag's help, saying which inputs it is for
    choices: tuple[str, ...] | None = None  # the values it takes (None: any)
    type: Callable[[str], Any] | None = None  # from the flag's text to the keyword's value (None: the text)


# ``--groups`` of the kinds whose items are files in class folders (images, clips): read from the names.
FOLDER_GROUPS = KindOption("groups", "image and audio folders: a regular expression whose first group in a file's "
                           "name is its group (speaker, patient), e.g. '^\\d+_([a-z]+)_'")


def grouped_args(groups: str | None) -> dict[str, str]:
    """A data section's args of ``--groups`` (a column, a file-name pattern): none when items are independent, so
    recipes without groups stay as they were. No group is then split between train/val/test or between folds."""
    return {} if groups is None else {"groups": groups}


class InputKind:
    """One input kind: subclass it, set ``name``, ``domain`` and ``Spec``, declare what differs from the defaults
    below, define the operations the kind supports, and decorate the class with :func:`register_kind`."""

    name: ClassVar[str]
    domain: ClassVar[str]  # the domain package that registers the kind
    tasks: ClassVar[tuple[str, ...]] = ()  # the family tasks (ModelEntry.task) whose default recipe the kind gives
    Spec: ClassVar[type[KindSpec]] = KindSpec
    ood: ClassVar[OODProfile] = OODProfile()  # the out-of-distribution scores of its inputs
    input_form: ClassVar[InputForm] = InputForm.FILES  # how predict and serve take its inputs
    options: ClassVar[tuple[KindOption, ...]] = ()  # the options of finetune_data and default_recipe

    def spec(self, card) -> Any:
        """The card's ``input_spec`` as this kind's typed :attr:`Spec`."""
        return self.Spec.from_card(card)

    def unsupported(self, operation: str) -> DataError:
        return DataError(f"{operation} is not available for inputs of kind {self.name!r} "
                         f"(available for kinds: {kinds_supporting(_OPERATIONS[operation])})")

    def finetune_data(self, card, path: str, **options) -> DataSection:
        """The recipe ``data`` section reading the user's data at ``path`` for the model of ``card``."""
        raise self.unsupported(FINETUNE)

    def predict(self, card, model, paths: Iterable[str], batch_size: int) -> Iterator[tuple[list[str], Any]]:
        """``(names, outputs)`` for the inputs at ``paths``, ``batch_size`` at a time."""
        raise self.unsupported(PREDICT)

    def read_bytes(self, card, data: bytes, name: str) -> Any:
        """The model input of one uploaded file's bytes ``data`` (named ``name`` in errors), read from memory as
        ``predict`` reads the file, for kinds of one input per file (``InputForm.FILE_EACH``): ``serve`` batches
        such inputs without writing a temporary file. Default: not supported, ``serve`` writes the file."""
        raise self.unsupported(READ_BYTES)

    def transform(self, card) -> Callable[[Any], Any]:
        """The preprocessing of the card's weights: a callable from one raw input (as the public data holds it) to
        the model's input, a tensor or a dict of the model's keyword inputs (see :func:`hub.transforms`)."""
        raise self.unsupported(TRANSFORM)

    def explanation(self, card, model, inputs: dict[str, Any], target: int | None = None) -> Explanation:
        """The map of what decided the model's output for one input (``inputs``: the model's keyword inputs of one
        item, as :meth:`example_input` gives them), explaining class ``target`` (None: the top class), by the
        family's own attention where it says that, else by attribution (:func:`hub.explain.integrated_gradients`)."""
        raise self.unsupported(EXPLAIN)

    def explain_samples(self, card, inputs: list[str], data: str | None = None) -> Iterator[tuple[str, dict]]:
        """``(name, model inputs of one item)`` for what the user names in ``inputs`` (files, node ids, row
        numbers, ...; default: a few items of the card's test data), ``data`` being ``--data``."""
        raise self.unsupported(EXPLAIN)

    def explanation_example(self, card, generator) -> dict[str, Any]:
        """A seeded input to explain, for the test over every shipped tag: by default :meth:`example_input`'s."""
        return self.example_input(card, 1, generator)[0]

    def draw_explanation(self, card, inputs: dict[str, Any], explanation: Explanation, path: Path,
                         title: str) -> None:
        """The figure of ``explanation`` (a PNG at ``path``); by default bars or a heat map of the values."""
        from hub.plotting import save_map_figure

        axes = list(explanation.axes or ())
        save_map_figure(explanation.values, path, title, explanation.labels, xlabel=axes[-1] if axes else "",
                        ylabel=axes[0] if len(axes) == 2 else "")

    def explain(self, card, model, inputs: list[str], out_dir: Path, data: str | None = None,
                target: int | None = None) -> Iterator[Path]:
        """Figures of what decided the model's output for ``inputs`` (see :meth:`explain_samples`), written to
        ``out_dir`` with their numbers (:func:`write_explanation`)."""
        samples = _with_options(self.explain_samples, f"explaining inputs of kind {self.name!r}", (card, inputs),
                                {"data": data})
        for name, item in samples:
            yield write_explanation(self, card, model, item, Path(out_dir) / f"{name}_explain.png", name, target)

    def baseline(self, run_dir) -> BaselineResult | None:
        """A classical baseline fitted and scored on the split of ``run_dir``; None when the kind has none."""
        return None

    def cross_validation(self, run_dir) -> CrossValidation | None:
        """What the choice by folds needs on the data of the finished run ``run_dir``; None (the default): the
        kind's predictor is chosen on the validation split (:mod:`hub.predictor`)."""
        return None

    def baseline_outputs(self, card, path: str) -> Any:
        """The saved baseline's outputs for the inputs at ``path``, one per input in the order ``predict`` yields
        them: classification (N, C) probabilities, regression values in the units ``predict`` gives. The file is
        the card's ``predictor["baseline"]`` (checked against its sha256). Default: the kind has no baseline
        predictor."""
        raise DataError(f"inputs of kind {self.name!r} have no baseline predictor: predict uses the model "
                        f"(kinds with one: {kinds_supporting('baseline_outputs')})")

    def blend_outputs(self, card, weight: float, model: Any, baseline: Any) -> Any:
        """The outputs of the card's predictor from the model's and the saved baseline's for the same inputs (as
        ``predict`` gives them: probabilities or values; tensors of one shape), ``weight`` on the model's: the
        baseline's own at 0, else ``weight * model + (1 - weight) * baseline``. A kind that blends in another space
        overrides it, as the choice among the members (:mod:`hub.predictor`) was made in that space."""
        return baseline if weight == 0 else weight * model + (1 - weight) * baseline

    def baseline_module(self, card) -> Any:
        """The saved baseline of the card's predictor as a ``torch.nn.Module`` from the model's input to the
        baseline's outputs (as :meth:`baseline_outputs` gives them), for exporting the predictor as one graph.
        Default: the kind's baseline has no such form, and exporting a baseline or blend predictor raises naming it."""
        raise DataError(f"the baseline of {card.name} ({(card.predictor.get('baseline') or {}).get('name')}, inputs of "
                        f"kind {self.name!r}) has no form an exported graph can hold, so its predictor "
                        f"({card.predictor.get('chosen')}) cannot be exported whole; `attnhub export NAME "
                        f"--model-only` exports the network alone (kinds that export it: "
                        f"{kinds_supporting('baseline_module')})")

    def default_recipe(self, family: str, path: str, **options) -> Recipe:
        """The recipe training the untrained ``family`` (of a task in :attr:`tasks`) on the data at ``path``."""
        raise self.unsupported(DEFAULT_RECIPE)

    def example_input(self, card, size: int, generator) -> tuple[dict[str, Any], dict[str, dict[int, str]]]:
        """Seeded inputs of ``size`` samples in the shapes and dtypes the model of ``card`` takes, named as its
        ``forward`` arguments, and the dynamic axes of each (``{name: {dim: axis name}}``): what export traces."""
        raise self.unsupported(EXAMPLE_INPUT)

    def input_spec_of(self, model) -> dict[str, Any] | None:
        """The ``input_spec`` of an untrained ``model`` of this kind's domain, from what the model says of its input;
        None when it says nothing (export then tries the input specs of the family's tags)."""
        return None

    def ood_input_scores(self, input_spec: dict[str, Any], classifier: bool) -> tuple[str, ...]:
        """The input scores (of ``ood.input_scores``) that a model of this kind gets, given its card's
        ``input_spec`` and whether it is a classifier; by default all of them."""
        return self.ood.input_scores

    def target_units(self, input_spec: dict[str, Any]) -> tuple[float, float]:
        """``(scale, shift)`` mapping the regression targets the model learns to the target's units
        (``scale * value + shift``), from the card's ``input_spec``; by default they are in their own units."""
        return 1.0, 0.0

    def ood_values(self, inputs) -> Any:
        """The model's input (a tensor, or a dict of its keyword inputs) as the numbers (B, ..., F) that the range
        check reads: the tensor, or the dict's ``x``."""
        return (inputs["x"] if isinstance(inputs, dict) else inputs).detach().float().cpu().numpy()

    def ood_rows(self, frame, card_spec: dict[str, Any]) -> tuple[Any, Any]:
        """For a kind whose :class:`OODProfile` reads ``rows``: ``(numbers (N, F), unseen (N,))`` of the raw table
        rows ``frame``, ``card_spec`` being the card's ``input_spec``."""
        raise DataError(f"the range check of inputs of kind {self.name!r} reads the model's input, not table rows")


KINDS: Registry[type[InputKind]] = Registry("input kind")
FINETUNE, PREDICT, EXPLAIN, DEFAULT_RECIPE, TRANSFORM, EXAMPLE_INPUT, READ_BYTES = (
    "fine-tuning on user data", "prediction from files", "explanations", "a default recipe for user data",
    "preprocessing of raw inputs", "an example input for export", "reading an upload from memory")
_OPERATIONS = {FINETUNE: "finetune_data", PREDICT: "predict", EXPLAIN: "explanation", DEFAULT_RECIPE: "default_recipe",
               TRANSFORM: "transform", EXAMPLE_INPUT: "example_input", READ_BYTES: "read_bytes"}


def register_kind(cls: type[InputKind]) -> type[InputKind]:
    """Class decorator registering an :class:`InputKind` subclass under its ``name``."""
    return KINDS.register(cls.name, cls)


def predict_per_file(model, paths: Iterable[str], read: Callable[[str], Any],
                     batch_size: int) -> Iterator[tuple[list[str], Any]]:
    """Yield ``(names, model(inputs))`` ``batch_size`` files at a time, for kinds with one input per file:
    ``read(path)`` gives the file's model input, a tensor of the same shape for every file or a dict of the model's
    keyword inputs (such tensors), stacked on dim 0 (``torch.utils.data.default_collate``; a dict is passed as
    ``model(**batch)``)."""
    from torch.utils.data import default_collate

    from hub.tasks import call_model

    names, inputs = [], []
    for path in paths:
        names.append(str(path))
        inputs.append(read(path))
        if len(names) == batch_size:
            yield names, call_model(model, default_collate(inputs))
            names, inputs = [], []
    if names:
        yield names, call_model(model, default_collate(inputs))


def batch_axes(inputs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, dict[int, str]]]:
    """``(inputs, axes)`` of :meth:`InputKind.example_input` for inputs whose first dimension is the batch."""
    return inputs, {name: {0: "batch"} for name in inputs}


def kinds_supporting(method: str) -> list[str]:
    """The registered kinds that define ``method`` (override the base class's)."""
    return [n for n in KINDS.names() if getattr(KINDS.get(n), method) is not getattr(InputKind, method)]


def registered_kind(name: str | None) -> InputKind | None:
    """The registered kind ``name`` (every domain imported when it is not registered yet), or None: the inputs of a
    card with no kind, or of a kind no domain registers, such as the core demos' sets."""
    if name is not None and name not in KINDS:
        import_domains()
    return KINDS.get(name)() if name in KINDS else None


def kind_options() -> list[KindOption]:
    """The options of every registered kind (every domain imported), once per name; where two kinds declare one
    name, its help joins theirs."""
    import_domains()
    found: dict[str, KindOption] = {}
    for name in KINDS.names():
        for option in KINDS.get(name).options:
            known = found.setdefault(option.name, option)
            if option.help not in known.help:
                found[option.name] = dataclasses.replace(known, help=f"{known.help}; {option.help}")
    return list(found.values())


def kind_of(card) -> InputKind:
    """The kind of the card's inputs, its domain imported when needed; its spec is checked."""
    name = card.input_spec.get("kind")
    if name is None:
        raise DataError(f"the card of {card.name} has no input_spec.kind; cannot tell what data it takes")
    if name not in KINDS:
        import_family_part(card.family, "kinds")  # the family's domain's kinds, not its data modules
    if name not in KINDS:
        raise DataError(f"inputs of kind {name!r} (the card of {card.name}) have no registered input kind, so "
                        f"no fine-tuning, prediction or explanation on user data (kinds: {KINDS.names()})")
    kind = KINDS.get(name)()
    kind.spec(card)
    return kind


def _with_options(fn: Callable, where: str, args: tuple, options: dict[str, Any]):
    """Call ``fn`` with the options that were given (not None); one it does not take raises naming it."""
    given = {k: v for k, v in options.items() if v is not None}
    parameters = inspect.signature(fn).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    unknown = sorted(k for k in given if k not in parameters and not takes_any)
    if unknown:
        raise DataError(f"option(s) {', '.join('--' + k for k in unknown)} do not apply to {where}")
    return fn(*args, **given)


def finetune_data_section(card, path: str, **options) -> DataSection:
    """The recipe ``data`` section that reads the user's data at ``path`` for the model of ``card``;
    ``options`` (e.g. ``target``, ``task`` for tables) are passed on when given."""
    kind = kind_of(card)
    return _with_options(kind.finetune_data, f"inputs of kind {kind.name!r}", (card, path), options)


def default_recipe(family: str, path: str, **options) -> Recipe:
    """The recipe training the untrained ``family`` on the user's data at ``path``, from the default recipe of
    the kind that families of its task read."""
    task = get_model_entry(family).task
    import_family_part(family, "kinds")
    givers = {t: KINDS.get(n) for n in kinds_supporting("default_recipe") for t in KINDS.get(n).tasks}
    if task not in givers:
        raise DataError(f"{family!r} has no pretrained tag given and its task {task!r} has no default recipe for user "
                        f"data (available for tasks: {sorted(givers)}); name a pretrained tag or a run folder")
    kind = givers[task]
    return _with_options(kind().default_recipe, f"inputs of kind {kind.name!r}", (family, path), options)


def baseline(card, run_dir) -> BaselineResult | None:
    """A classical baseline's test metrics on the split of ``run_dir``, or None when the input kind has none."""
    name = card.input_spec.get("kind", "")
    return KINDS.get(name)().baseline(run_dir) if name in KINDS else None


def baseline_outputs(card, path: str) -> Any:
    """The outputs of the baseline saved with the card for the inputs at ``path`` (the kind's
    ``baseline_outputs``)."""
    return kind_of(card).baseline_outputs(card, path)


def transform(card) -> Callable[[Any], Any]:
    """The preprocessing the weights of ``card`` expect (the kind's ``transform``)."""
    return kind_of(card).transform(card)


def predict_logits(card, model, paths: Iterable[str], batch_size: int) -> Iterator[tuple[list[str], Any]]:
    """Yield ``(names, logits)`` for the inputs, ``batch_size`` at a time."""
    return kind_of(card).predict(card, model, paths, batch_size)


def class_index(card, target: str | None) -> int | None:
    """``--target CLASS`` as a class index: one of the card's class names, or a class number."""
    if target is None:
        return None
    names = list(card.label_names or [])
    if target in names:
        return names.index(target)
    if not names:
        raise DataError(f"--target {target!r}: {card.name} is not a classifier ({card.task}), so it has no class to "
                        "choose; its explanation is of its output")
    if target.isdigit() and int(target) < len(names):
        return int(target)
    raise DataError(f"--target {target!r} is not a class of {card.name}: expected one of {names} or a class number "
                    f"0-{len(names) - 1}")


def write_explanation(kind: InputKind, card, model, inputs: dict[str, Any], path: Path, name: str,
                      target: int | None = None) -> Path:
    """Explain one input and write its figure at ``path`` (X.png), the map's numbers beside it (X.npy) and what was
    explained (X.json: method, class and its probability, input name, family); returns the figure's path."""
    import io
    import json

    import numpy as np

    from hub.io import atomic_write_bytes

    explanation = kind.explanation(card, model, inputs, target)
    if explanation.target is not None:
        names = card.label_names or []
        label = names[explanation.target] if explanation.target < len(names) else str(explanation.target)
        said = f"class {label} ({explanation.probability:.2f})"
    else:
        said = f"output {explanation.output:.3g}" if explanation.output is not None else ""
    kind.draw_explanation(card, inputs, explanation, path, f"{name}: {said}\n{explanation.method}")
    buffer = io.BytesIO()
    np.save(buffer, np.asarray(explanation.values, dtype=np.float32))
    atomic_write_bytes(path.with_suffix(".npy"), buffer.getvalue())
    record = explanation.record(name, card.family, card.label_names)
    atomic_write_bytes(path.with_suffix(".json"), (json.dumps(record) + "\n").encode())
    return path


def explain_inputs(card, model, inputs: list[str], out_dir, data: str | None = None,
                   target: str | int | None = None) -> Iterator[Path]:
    """Figures of what decided the model's output for ``inputs`` (see the kind's ``explain``), written to
    ``out_dir``, each X.png with X.npy (the map) and X.json (method, class explained and its probability, input,
    family) beside it; ``target`` (a class name or number) explains that class instead of the top one."""
    kind = kind_of(card)
    target = class_index(card, None if target is None else str(target))
    return _with_options(kind.explain, f"explaining inputs of kind {kind.name!r}", (card, model, inputs, out_dir),
                         {"data": data, "target": target})
