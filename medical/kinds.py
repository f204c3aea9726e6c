"""The medical input kinds: ``survival_table`` (a CSV of patients for the survival models) and ``icu_stays``
(PhysioNet 2012 stays, explained by TFCAM's attention)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import torch

from hub.data import read_csv_frame
from hub.errors import DataError
from hub.kinds import InputKind, KindSpec, register_kind
from medical.data import HOURS, VARIABLES, read_record, stay_arrays
from medical.explain import explain_stays
from medical.io import survival_features, survival_inputs


@dataclass(frozen=True)
class SurvivalTableSpec(KindSpec):
    """A survival model's input: its gene and clinical columns, standardised with the training ``mean`` and ``std``
    (genes first)."""

    genes: list[str]
    clinical: list[str]
    mean: list[float]
    std: list[float]


@register_kind
class SurvivalTableKind(InputKind):
    """A CSV of patients (time, event, gene and clinical columns) for the survival models."""

    name, domain, Spec = "survival_table", "medical", SurvivalTableSpec

    def finetune_data(self, card, path: str, time: str | None = None, event: str | None = None,
                      genes: list[str] | None = None) -> dict[str, Any]:
        """``attnhub finetune survival_fusion.metabric --data my.csv --time T --event E --genes g1,g2,g3,g4
        data.args.clinical_cols=[...]``: the card's column names are the defaults; the loss, its ``rank_weight`` and the
        batch size are the card's (the pairwise ordering loss needs mini-batches)."""
        spec, trained = self.spec(card), card.data.get("args", {})
        return {"name": "survival_csv", "args": {
            "path": str(path), "time_col": time or trained.get("time_col", "time"),
            "event_col": event or trained.get("event_col", "event"),
            "gene_cols": list(genes if genes is not None else spec.genes), "clinical_cols": list(spec.clinical),
            "expect_num_genes": len(spec.genes), "expect_num_clinical": len(spec.clinical),
            "loss": trained.get("loss", "efron"), "rank_weight": trained.get("rank_weight", 0.0),
            "batch_size": trained.get("batch_size", 8192)}}

    def predict(self, card, model, paths: Iterable[str], batch_size: int) -> Iterator[tuple[list[str], torch.Tensor]]:
        """``attnhub predict survival_fusion.metabric patients.csv``: the risk score (log relative hazard; higher
        means earlier events) of every patient row, named by its ``id`` column or ``file:line``. The columns
        are the card's gene and clinical columns (others, such as time and event, are ignored); empty gene
        cells are masked, as in training; the card's training mean and std standardise them."""
        spec = self.spec(card)
        for path in paths:
            table = read_csv_frame(path, f"one row per patient with the columns {spec.genes + spec.clinical}")
            inputs = _survival_model_inputs(spec, survival_features(table, spec.genes, spec.clinical, path))
            names = (table["id"].astype(str).tolist() if "id" in table.columns
                     else [f"{path}:{line}" for line in range(2, len(table) + 2)])
            for start in range(0, len(names), batch_size):
                yield names[start:start + batch_size], model(**{k: v[start:start + batch_size]
                                                                 for k, v in inputs.items()})

    def transform(self, card) -> Callable[[Any], dict[str, torch.Tensor]]:
        """Patients' raw rows (a pandas DataFrame or CSV path with the card's gene and clinical columns, others
        ignored, or an (N, G + C) array in the card's column order, genes first, as the DeepSurv METABRIC file's
        ``x`` holds them; an empty gene cell is masked) -> the model's keyword inputs, standardised with the
        training mean and std: ``clinical`` (N, C) and, with genes, ``genes`` and ``gene_mask`` (N, G)."""
        spec = self.spec(card)
        return lambda rows: _survival_model_inputs(spec, survival_features(rows, spec.genes, spec.clinical,
                                                                           "the patients' rows"))


def _survival_model_inputs(spec: SurvivalTableSpec, x) -> dict[str, torch.Tensor]:
    """The model's keyword inputs of raw features x (N, G + C) (:func:`medical.io.survival_inputs`); no gene
    inputs for a model without genes."""
    inputs = survival_inputs(x, spec.mean, spec.std, len(spec.genes))
    return inputs if spec.genes else {"clinical": inputs["clinical"]}


@dataclass(frozen=True)
class IcuStaysSpec(KindSpec):
    """An ICU model's input: ``hours`` hourly steps of the ``variables``, with the training statistics of
    :func:`medical.data.stay_statistics` (clipping bounds, mean and std of the variables and descriptors)."""

    variables: list[str]
    hours: int
    low: list[float]
    high: list[float]
    mean: list[float]
    std: list[float]
    static_mean: list[float]
    static_std: list[float]


@register_kind
class IcuStaysKind(InputKind):
    """PhysioNet 2012 ICU stays; explained by TFCAM's attention over the card's test stays."""

    name, domain, Spec = "icu_stays", "medical", IcuStaysSpec

    def transform(self, card) -> Callable[[Any], dict[str, torch.Tensor]]:
        """A patient's raw PhysioNet 2012 record (the path of its ``set-a/<id>.txt`` file: ``Time,Parameter,Value``
        rows) -> the model's keyword inputs, one stay (:func:`medical.data.stay_arrays` with the card's training
        statistics): ``values`` and ``mask`` (hours, variables), ``static`` (9,); batch stays with
        ``torch.utils.data.default_collate``."""
        spec = self.spec(card)
        if list(spec.variables) != VARIABLES or spec.hours != HOURS:
            raise DataError(f"{card.name} takes {spec.hours} hours of {len(spec.variables)} variables; its "
                            f"preprocessing reads the PhysioNet 2012 grid of {HOURS} hours of {VARIABLES}")
        stats = dataclasses.asdict(spec)

        def prepare(record) -> dict[str, torch.Tensor]:
            means, static_raw = read_record(record)
            return {k: torch.from_numpy(v[0]) for k, v in stay_arrays(means[None], static_raw[None], stats).items()}

        return prepare

    def explain(self, card, model, inputs: list[str], out_dir: Path) -> Iterator[Path]:
        return explain_stays(card, model, inputs, out_dir)
