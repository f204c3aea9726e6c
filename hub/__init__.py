"""Attention Hub: attention models across domains, loadable in one line.

>>> import hub
>>> model = hub.load("vit_digits.sklearn")
>>> hub.list_models("vit_*")

``import hub`` is light: domain packages (and timm, PyG, torchaudio, Lightning) are imported on
first use of the registry.
"""
from hub.core.registry import list_datasets, list_models, register_dataset, register_model
from hub.errors import (
    DataError,
    HubError,
    OfflineError,
    RecipeError,
    RegistryError,
    TrainingError,
    UnknownModelError,
    WeightsError,
)

__version__ = "0.1.0"


def load(name, pretrained=True, num_classes=None, **model_args):
    from hub.models import load as _load

    return _load(name, pretrained=pretrained, num_classes=num_classes, **model_args)


load.__doc__ = "Build a model by name and load its weights; see :func:`hub.models.load`."


def load_run(path, pretrained=True, num_classes=None, **model_args):
    """The model of a finished run folder (its card and best weights); see :func:`hub.models.load_run`."""
    from hub.models import load_run as _load_run

    return _load_run(path, pretrained=pretrained, num_classes=num_classes, **model_args)


def create_model(name, num_classes=None, **model_args):
    """Build the untrained model of a registered family."""
    from hub.models import create_model as _create

    return _create(name, num_classes=num_classes, **model_args)


def transforms(name):
    """The preprocessing of a pretrained tag's or run's weights, as torchvision's ``Weights.transforms()``: a callable
    from one input in the public raw form of its data to what the model takes, so raw data in gives the card's
    quality out. The raw forms, by input kind: an image file, PIL image or (H, W[, C]) uint8 array (``image``,
    ``scene``); a table's rows as a pandas DataFrame or CSV path, with the training columns (``table``); a WAV/FLAC
    file or a ``(waveform, sample_rate)`` pair as ``soundfile.read`` returns it (``audio``: the log-mel input); PyG's
    ``Data`` of the graph, e.g. ``Planetoid(root, name)[0]`` as it loads (``graph``: the ``{"x", "edge_index"}``
    keyword inputs, features row-normalised as in training); one unit's raw sensor rows as a DataFrame (``cycle``
    and the sensor columns, e.g. an engine of a C-MAPSS file) or unit CSV (``sensor_series``: its last window,
    min-max scaled); raw speeds (T, N) as an array or DataFrame with their timestamps, or a speeds CSV
    (``traffic_series``: the last input window with its time of day); patients' rows as a DataFrame, CSV or
    (N, G + C) array as the DeepSurv file holds METABRIC (``survival_table``: the standardised keyword inputs); a
    patient's PhysioNet 2012 record file, ``set-a/<id>.txt`` (``icu_stays``: the hourly grid's keyword inputs).

    >>> import numpy as np, torch
    >>> model, prepare = hub.load("vit_digits.sklearn"), hub.transforms("vit_digits.sklearn")
    >>> x = torch.stack([prepare(np.zeros((8, 8), np.uint8))])  # one image -> (1, 1, 8, 8)
    >>> model(x).shape
    torch.Size([1, 10])
    """
    from hub.core.registry import model_card as _card
    from hub.kinds import transform

    return transform(_card(name))


def model_card(name):
    """The model card (:class:`hub.core.cards.PretrainedCfg`) of a pretrained tag, run folder or ``hf-hub:`` repository;
    see :func:`hub.core.registry.model_card`."""
    from hub.core.registry import model_card as _card

    return _card(name)


def reproduce(name, seeds=None, overrides=None, output_dir=None, tolerance=None, progress=True):
    """Retrain a tag from its card's recipe and compare with the card; see :func:`hub.reproduction.reproduce`."""
    from hub.reproduction import ABSOLUTE_TOLERANCE
    from hub.reproduction import reproduce as _reproduce

    return _reproduce(name, seeds=seeds, overrides=overrides, output_dir=output_dir,
                      tolerance=ABSOLUTE_TOLERANCE if tolerance is None else tolerance, progress=progress)


def export(name, format, out_dir=None):
    """Export a pretrained tag, run folder or family to ONNX or torch.export; see :func:`hub.deploy.exporter.export`."""
    from hub.deploy.exporter import export as _export

    return _export(name, format, out_dir)


__all__ = ["load", "load_run", "export", "create_model", "model_card", "reproduce", "list_models", "list_datasets",
           "register_model", "register_dataset", "HubError", "UnknownModelError", "RegistryError", "WeightsError",
           "OfflineError", "RecipeError", "DataError", "TrainingError"]
