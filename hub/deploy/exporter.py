"""Exporting a model to a file that runs without this package: ``torch.export`` (``.pt2``) or ONNX (``.onnx``).

``export(name, format, out_dir)`` writes three files into ``out_dir``:

- ``model.pt2`` (``torch.export.save`` of the exported program) or ``model.onnx`` (``torch.onnx.export`` with
  ``dynamo=True``), with a dynamic batch dimension (graphs: dynamic numbers of nodes and edges);
- ``card.json``: the model card;
- ``preprocess.json``: the card's ``input_spec`` (what a runtime must do to raw data before the model), the
  model's input names, shapes and dtypes, and the ``output_names`` / ``label_names`` of its outputs.

The example input that tracing needs comes from the card's input kind (:meth:`hub.kinds.InputKind.example_input`, in
its domain's ``kinds.py``), in the shapes of the card's ``input_spec``. After writing, the artefact is run at batch
sizes 1 and 3 and compared with eager PyTorch; a model that cannot be exported (an operator without an ONNX kernel,
data-dependent control flow, random draws in its forward) raises a :class:`HubError` naming the reason.
"""
from __future__ import annotations

import contextlib
import inspect
import io
import json
import logging
import os
import re
import tempfile
import traceback
import warnings
from pathlib import Path
from typing import Any

import torch

from hub.core.cards import REPO_ROOT, PretrainedCfg, atomic_write_bytes
from hub.core.registry import get_model_entry, get_pretrained_cfg, pretrained_tags
from hub.errors import HubError
from hub.kinds import KINDS, kinds_supporting, registered_kind
from hub.names import ModelRef, RefKind, resolve
from hub.predictor import predictor_module

FORMATS = ("onnx", "pt2")
CHECK_SIZES = (1, 3)  # the artefact must give eager PyTorch's outputs at these batch sizes
TOLERANCE = 1e-4  # max abs difference, fp32, of the check after writing
EXPORT_SIZE = 2  # batch size of the traced example: 1 would let the exporters specialise the batch dimension


def example_inputs(card: PretrainedCfg, size: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """Seeded inputs of ``size`` samples (graphs: nodes) in the shapes and dtypes the model of ``card`` takes,
    named as its ``forward`` arguments."""
    return _example(card, size, seed)[0]


def _example(card: PretrainedCfg, size: int, seed: int = 0):
    """``(inputs, axes)``: the example input of the card's kind (:meth:`hub.kinds.InputKind.example_input`)."""
    name = card.input_spec.get("kind")
    if name is None:
        raise HubError(f"the card of {card.name} has no input_spec.kind; cannot tell what input to export with")
    kind = registered_kind(name)
    if kind is None:
        raise HubError(f"no example input for inputs of kind {name!r}, which no domain registers (available: "
                       f"{kinds_supporting('example_input')})")
    return kind.example_input(card, size, torch.Generator().manual_seed(seed))


def _inferred_card(family: str, model: torch.nn.Module) -> PretrainedCfg:
    """A card for the untrained ``family`` built with its default arguments: the input spec is one that a kind of
    its domain reads off the model (:meth:`hub.kinds.InputKind.input_spec_of`: an audio model's ``input_size``) or
    that of one of the family's shipped tags, the first the model runs on."""
    entry = get_model_entry(family)
    defaults = {k: p.default for k, p in inspect.signature(entry.builder).parameters.items()
                if p.default is not p.empty}
    own = [KINDS.get(name)().input_spec_of(model) for name in KINDS.names() if KINDS.get(name).domain == entry.domain]
    specs = [*(spec for spec in own if spec is not None),
             *(get_pretrained_cfg(tag).input_spec for tag in pretrained_tags(family))]
    for spec in specs:
        card = PretrainedCfg(name=family, sha256="", num_bytes=0, task=entry.task, model_args=defaults,
                             input_spec=spec, notes="untrained: exported with the family's default arguments")
        try:
            with torch.no_grad():
                model(**example_inputs(card, EXPORT_SIZE))
        except Exception:  # this spec does not fit the default model: try the next
            continue
        return card
    raise HubError(f"{family!r} is an untrained family with no model card, and its input cannot be inferred (from "
                   "a shipped tag's input_spec or what the model says of its input, such as an audio model's "
                   "input_size); export a pretrained tag or a run "
                   "folder, whose card's input_spec says what the model takes")


def _model_and_card(ref: ModelRef) -> tuple[torch.nn.Module, PretrainedCfg]:
    from hub.models import create_model, load

    if ref.kind is RefKind.TIMM:
        raise HubError(f"{ref.name!r}: timm models have no model card to take an input from; export a hub family, "
                       "pretrained tag or run folder")
    if ref.has_card:
        model = load(ref)
        return model.eval(), model.pretrained_cfg
    model = create_model(ref).eval()
    return model, _inferred_card(ref.family, model)


def _user_frame(err: BaseException) -> str:
    """``path:line in function: code`` of the innermost frame of this repository's code (not this module) in the
    traceback of ``err``: where a model's forward did what the exporter could not follow."""
    from hub.core.registry import domain_packages

    # by package, so a virtual environment inside the checkout (.venv/...) is not ours
    ours = {"hub", *domain_packages()}
    frames = [f for f in traceback.extract_tb(err.__traceback__)
              if Path(f.filename).is_relative_to(REPO_ROOT) and Path(f.filename) != Path(__file__)
              and Path(f.filename).relative_to(REPO_ROOT).parts[0] in ours]
    if not frames:
        return ""
    frame = frames[-1]
    return f"{Path(frame.filename).relative_to(REPO_ROOT).as_posix()}:{frame.lineno} in {frame.name}: {frame.line}"


def _reason(err: BaseException) -> str:
    """What an exporter's error says failed (operator, guard), without its traceback, and where in our code."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    text = f"{type(err).__name__}: {' '.join(lines[:2])[:500]}"
    if "DataDependent" in type(err).__name__:
        text = ("its forward turns tensor values into Python numbers or branches on them (data-dependent control "
                f"flow), which an exported graph cannot hold; {text}")
    where = _user_frame(err)
    return f"{text} (at {where})" if where else text


@contextlib.contextmanager
def _quiet_exporters():
    """Silence the exporters' warnings and graph dumps (a failure is raised as a HubError instead)."""
    loggers = [logging.getLogger(n) for n in ("torch.fx.experimental.symbolic_shapes", "torch._export",
                                               "torch.export", "torch.onnx", "onnxscript")]
    levels = [logger.level for logger in loggers]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for logger in loggers:
                logger.setLevel(logging.CRITICAL)
            yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def _check_deterministic(model: torch.nn.Module, inputs: dict[str, torch.Tensor], name: str) -> torch.Tensor:
    with torch.no_grad():
        first, second = model(**inputs), model(**inputs)
    if not isinstance(first, torch.Tensor):
        raise HubError(f"{name} returns {type(first).__name__}, not one tensor; only single-output models export")
    if not torch.equal(first, second):
        raise HubError(f"{name} is not a deterministic function of its input in eval mode (its forward draws "
                       "random numbers, e.g. slot attention's initial slots); an exported artefact would not "
                       "reproduce it")
    return first


def _exported_program(model, inputs, axes, name: str):
    dims: dict[str, torch.export.Dim] = {}
    dynamic = {arg: {dim: dims.setdefault(axis, torch.export.Dim(axis, min=1)) for dim, axis in arg_axes.items()}
               for arg, arg_axes in axes.items()}
    try:  # torch.export prints the partial graph to stderr when it fails: the HubError says what failed instead
        with contextlib.redirect_stderr(io.StringIO()):
            return torch.export.export(model, (), kwargs=inputs, dynamic_shapes=dynamic, strict=False)
    except Exception as err:  # the exporter raises many types (UserError, GuardOnDataDependentSymNode, ...)
        raise HubError(f"{name} cannot be exported by torch.export: {_reason(err)}") from err


def _write_onnx(program, path: Path, input_names: list[str], name: str) -> None:
    try:
        with tempfile.TemporaryDirectory() as tmp:
            onnx_program = torch.onnx.export(program, dynamo=True, input_names=input_names, output_names=["output"],
                                             optimize=True, verbose=False)
            onnx_program.save(Path(tmp) / "model.onnx")
            atomic_write_bytes(path, (Path(tmp) / "model.onnx").read_bytes())
    except ImportError as err:
        raise HubError(f"ONNX export needs onnx and onnxscript ({err}); pip install 'attention-hub[export]'") from err
    except Exception as err:
        raise HubError(f"{name} cannot be exported to ONNX: {_reason(err)}") from err


def run_artefact(path: str | os.PathLike, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """The output of an exported ``.pt2`` or ``.onnx`` file for ``inputs`` (named as the model's arguments)."""
    path = Path(path)
    if path.suffix == ".pt2":
        program = torch.export.load(path)
        with torch.no_grad():
            return program.module()(**inputs)
    try:
        import onnxruntime
    except ImportError as err:
        raise HubError("running an ONNX file needs onnxruntime; pip install 'attention-hub[export]'") from err
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feed = {i.name: inputs[i.name].numpy() for i in session.get_inputs()}
    return torch.from_numpy(session.run(None, feed)[0])


def _check(path: Path, model, card: PretrainedCfg, name: str) -> None:
    for size in CHECK_SIZES:
        inputs = example_inputs(card, size, seed=size)
        with torch.no_grad():
            expected = model(**inputs)
        try:
            got = run_artefact(path, inputs)
        except Exception as err:
            raise HubError(f"the exported {path.name} of {name} does not run at size {size}: {_reason(err)}") from err
        if got.shape != expected.shape or (got - expected).abs().max() > TOLERANCE:
            raise HubError(f"the exported {path.name} of {name} differs from PyTorch at size {size}: shape "
                           f"{tuple(got.shape)} vs {tuple(expected.shape)}, max abs difference "
                           f"{(got - expected).abs().max() if got.shape == expected.shape else 'n/a'}")


def _preprocess(card: PretrainedCfg, inputs: dict[str, torch.Tensor], axes: dict[str, dict[int, str]],
                output: torch.Tensor, predictor: str) -> dict[str, Any]:
    def shape(tensor, arg_axes):
        return [arg_axes.get(i, n) for i, n in enumerate(tensor.shape)]

    return {"input_spec": card.input_spec, "predictor": predictor,
            "inputs": [{"name": n, "shape": shape(t, axes[n]), "dtype": str(t.dtype).removeprefix("torch.")}
                       for n, t in inputs.items()],
            "output": {"name": "output", "shape": shape(output, axes[next(iter(inputs))])},  # first axis as x's
            "output_names": card.output_names, "label_names": card.label_names}


def export(name: str | os.PathLike | ModelRef, format: str, out_dir: str | os.PathLike | None = None,
           model_only: bool = False) -> Path:
    """Export the model ``name`` (pretrained tag, run folder, or an untrained family whose input can be
    inferred) as ``format`` (``"onnx"`` or ``"pt2"``) into ``out_dir`` (default ``./exports/NAME-FORMAT``) with
    its ``card.json`` and ``preprocess.json``; returns the artefact's path. A run whose predictor is its baseline
    or a blend (:mod:`hub.predictor`) is exported as that predictor, one graph giving its outputs (a classifier's:
    class probabilities), where its input kind can express the baseline as a module; else a :class:`HubError`
    names the baseline. ``model_only`` exports the network alone whatever the predictor.

    >>> path = export("vit_digits.sklearn", "onnx", "exports/vit_digits")  # doctest: +SKIP
    """
    if format not in FORMATS:
        raise HubError(f"unknown export format {format!r}; expected one of {', '.join(FORMATS)}")
    ref = resolve(name)
    name = ref.name
    model, card = _model_and_card(ref)
    predictor = "model" if model_only else (getattr(card, "predictor", None) or {}).get("chosen", "model")
    if predictor != "model":
        model = predictor_module(model, card)
    inputs, axes = _example(card, EXPORT_SIZE)
    output = _check_deterministic(model, inputs, name)
    safe_name = re.sub(r"[^A-Za-z0-9_.\-]+", "_", ref.path.name if ref.kind is RefKind.RUN else name)
    out = Path(out_dir) if out_dir is not None else Path("exports") / f"{safe_name}-{format}"
    path = out / f"model.{format}"
    with _quiet_exporters():
        program = _exported_program(model, inputs, axes, name)
        out.mkdir(parents=True, exist_ok=True)
        if format == "pt2":
            with tempfile.TemporaryDirectory() as tmp:
                torch.export.save(program, Path(tmp) / "model.pt2")
                atomic_write_bytes(path, (Path(tmp) / "model.pt2").read_bytes())
        else:
            _write_onnx(program, path, list(inputs), name)
        _check(path, model, card, name)
    atomic_write_bytes(out / "card.json", (json.dumps(card.to_dict(), indent=2) + "\n").encode())
    atomic_write_bytes(out / "preprocess.json",
                       (json.dumps(_preprocess(card, inputs, axes, output, predictor), indent=2) + "\n").encode())
    return path
