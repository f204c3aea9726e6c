"""The medical input kinds: ``survival_table`` (a CSV of patients for the survival models; the default recipe of the
``survival`` families on a user's table, CoxPH beside them) and ``icu_stays`` (PhysioNet 2012 style stays: the default
recipe of the ICU families on a user's folder of records, predicted from record files, explained by TFCAM's
attention; a logistic regression on per-variable summaries beside them, which can be the run's predictor or blended
with the model).

>>> SurvivalTableKind().default_recipe("deepsurv_mlp", "my.csv", time="week", event="arrest").data.args
{'path': 'my.csv', 'time_col': 'week', 'event_col': 'arrest', 'gene_cols': [], 'batch_size': 512}
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import torch

from hub.datafiles import read_csv_frame, row_numbers
from hub.errors import DataError
from hub.explain import Explanation
from hub.kinds import (
    BaselineResult,
    CrossValidation,
    InputForm,
    InputKind,
    KindOption,
    KindSpec,
    OODProfile,
    batch_axes,
    predict_per_file,
    register_kind,
)
from hub.predictor import blend_of, load_arrays
from hub.recipe import (
    DataSection,
    EarlyStoppingSection,
    OptimizerSection,
    Recipe,
    TrainerSection,
    recipe_file,
    scratch_recipe,
)
from medical.baselines import (
    coxph_on_run_split,
    icu_cross_validation,
    kept_survival_risk,
    logistic_regression_on_run_split,
    logistic_regression_outputs,
    ranked_blend,
    survival_cross_validation,
)
from medical.explain import patient_explanation, plot_tfcam_explanations, stay_explanation, stay_samples
from medical.icu_data import read_record, stay_arrays
from medical.io import clinical_columns, survival_features, survival_inputs


@dataclass(frozen=True)
class SurvivalTableSpec(KindSpec):
    """A survival model's input: its gene and clinical features, standardised with the training ``mean`` and ``std``
    (genes first); a categorical clinical column (a key of ``categories``, with its training categories) enters as
    one feature ``column=category`` per category (:mod:`medical.io`)."""

    genes: list[str]
    clinical: list[str]
    mean: list[float]
    std: list[float]
    categories: dict[str, list[str]] = field(default_factory=dict)


# How a survival family trains from scratch on a user's table (the recipe files are tuned per public dataset):
SURVIVAL_BATCH_SIZE = 512  # patients a mini-batch (Efron's Cox loss compares the patients of a batch)
SURVIVAL_OPTIMIZER = OptimizerSection(name="adamw", lr=3e-3, weight_decay=1e-2)  # AdamW at 3e-3, decay 1e-2
# at most 100 epochs, stopped after 20 without a better validation Harrell's C, the best epoch tested; logged each step
SURVIVAL_TRAINER = TrainerSection(max_epochs=100, early_stopping=EarlyStoppingSection(patience=20), log_every_n_steps=1)


@register_kind
class SurvivalTableKind(InputKind):
    """A CSV of patients (time, event, gene and clinical columns) for the survival models."""

    name, domain, Spec = "survival_table", "medical", SurvivalTableSpec
    tasks = ("survival",)
    ood = OODProfile(input_scores=("range",), never_empty=True)  # the range check of the covariates
    options = (
        KindOption("time", "survival tables: the follow-up time column (default: the card's, 'time')"),
        KindOption("event", "survival tables: the 0/1 event column (default: the card's, 'event')"),
        KindOption("genes", "survival tables: the gene columns, comma-separated, as many as the card's (default: "
                   "the card's names); the clinical columns are the card's unless data.args.clinical_cols=[...] "
                   "names others", type=lambda text: [g.strip() for g in text.split(",")] if text else None),
    )

    def finetune_data(self, card, path: str, time: str | None = None, event: str | None = None,
                      genes: list[str] | None = None) -> DataSection:
        """``attnhub finetune survival_fusion.metabric --data my.csv --time T --event E --genes g1,g2,g3,g4
        data.args.clinical_cols=[...]``: the card's column names and categories are the defaults; the loss, its
        ``rank_weight`` and the batch size are the card's (the pairwise ordering loss needs mini-batches). A table
        without the card's gene columns, with no ``--genes`` naming its own, is refused: nothing of the model fits it,
        and the error names the command that trains the family from scratch on the table's own covariates."""
        spec, trained = self.spec(card), card.data.get("args", {})
        time, event = time or trained.get("time_col", "time"), event or trained.get("event_col", "event")
        if genes is None and spec.genes:
            header = read_csv_frame(path, "a survival table with a header row", nrows=1).columns
            absent = [g for g in spec.genes if g not in header]
            if absent:
                raise DataError(f"{path} lacks the gene columns {absent} that {card.name} takes (genes {spec.genes}, "
                                f"clinical {spec.clinical}); name your columns for these genes with --genes "
                                f"(as many, in that order), or train {card.family} from scratch on the table's own "
                                f"covariates: attnhub finetune {card.family} --data {path} --time {time} "
                                f"--event {event}")
        clinical = clinical_columns(spec.clinical, spec.categories)
        return DataSection(name="survival_csv", args={
            "path": str(path), "time_col": time, "event_col": event,
            "gene_cols": list(genes if genes is not None else spec.genes), "clinical_cols": clinical,
            "categories": dict(spec.categories), "expect_num_genes": len(spec.genes),
            "expect_num_clinical": len(clinical), "loss": trained.get("loss", "efron"),
            "rank_weight": trained.get("rank_weight", 0.0), "batch_size": trained.get("batch_size", 8192)})

    def default_recipe(self, family: str, path: str, time: str | None = None, event: str | None = None,
                       genes: list[str] | None = None) -> Recipe:
        """``attnhub finetune deepsurv_mlp --data my.csv --time T --event E [--genes g1,g2]``: the family's default
        dimensions, sized to the table's covariates (every column but time, event, the genes and an ``id`` column is
        clinical, numeric or categorical; no genes: the model has no genetic branch); Efron's Cox loss on mini-batches
        of 512 patients, AdamW, the epoch with the best validation Harrell's C."""
        if time is None or event is None:
            raise DataError(f"training {family!r} from scratch on {path} needs --time COLUMN (follow-up time) and "
                            "--event COLUMN (1: event observed, 0: censored)")
        data = DataSection(name="survival_csv", args={"path": str(path), "time_col": time, "event_col": event,
                                                      "gene_cols": list(genes or []),
                                                      "batch_size": SURVIVAL_BATCH_SIZE})
        return scratch_recipe(family, data, optimizer=SURVIVAL_OPTIMIZER, trainer=SURVIVAL_TRAINER)

    def baseline(self, run_dir) -> BaselineResult:
        return coxph_on_run_split(run_dir)

    def cross_validation(self, run_dir) -> CrossValidation:
        """Folds of the patients outside the test split, CoxPH and a random survival forest out of fold
        (:func:`medical.baselines.survival_cross_validation`)."""
        return survival_cross_validation(run_dir)

    def baseline_outputs(self, card, path: str) -> torch.Tensor:
        """The kept baseline's risks for the patient rows of the CSV at ``path``, read as :meth:`predict` reads
        them: CoxPH's linear predictor (a log hazard ratio like the models'), or a random survival forest's (kept
        after a choice by folds); the arrays come from the card's ``baseline.safetensors`` (sha256 checked)."""
        spec = self.spec(card)
        table = read_csv_frame(path, f"one row per patient with the columns {list(spec.genes)} and {spec.clinical}")
        risk = kept_survival_risk(_cox_arrays(card), card.card_dir or ".", _survival_model_inputs(spec, table, path))
        return torch.from_numpy(np.asarray(risk, np.float64))

    def blend_outputs(self, card, weight: float, model: torch.Tensor, baseline: torch.Tensor) -> torch.Tensor:
        """A blend averages the two members' rank-normalised risks (each against its validation risks, kept in
        the card's ``baseline.safetensors``): a score in (0, 1), higher for an earlier event; the baseline alone
        (weight 0) gives its own risks."""
        if weight == 0:
            return baseline
        mixed = ranked_blend(_cox_arrays(card), weight, model.double().numpy(), baseline.double().numpy())
        return torch.as_tensor(mixed, dtype=model.dtype)

    def predict(self, card, model, paths: Iterable[str], batch_size: int) -> Iterator[tuple[list[str], torch.Tensor]]:
        """``attnhub predict survival_fusion.metabric patients.csv``: the risk score (log relative hazard; higher
        means earlier events) of every patient row, named by its ``id`` column or ``file:line``. The columns
        are the card's gene and clinical columns (others, such as time and event, are ignored); empty gene
        cells are masked, as in training; the card's training mean and std standardise them."""
        spec = self.spec(card)
        columns = list(spec.genes) + clinical_columns(spec.clinical, spec.categories)
        for path in paths:
            table = read_csv_frame(path, f"one row per patient with the columns {columns}")
            inputs = _survival_model_inputs(spec, table, path)
            names = (table["id"].astype(str).tolist() if "id" in table.columns
                     else row_numbers(len(table), first=2, source=path))
            for start in range(0, len(names), batch_size):
                yield names[start:start + batch_size], model(**{k: v[start:start + batch_size]
                                                                 for k, v in inputs.items()})

    def explanation(self, card, model, inputs: dict[str, Any], target: int | None = None) -> Explanation:
        """Integrated Gradients of the risk over the clinical values and genes
        (:func:`medical.explain.patient_explanation`); a survival model has no classes."""
        return patient_explanation(card, model, inputs)

    def explain_samples(self, card, inputs: list[str], data: str | None = None) -> Iterator[tuple[str, dict]]:
        """``(rowN, model inputs)`` per 1-based row number of ``--data`` (a CSV of patients; default rows 1-4)."""
        if data is None:
            raise DataError(f"give the patients' CSV to explain: attnhub explain {card.name} [ROW...] --data "
                            "PATIENTS.csv")
        spec = self.spec(card)
        table = read_csv_frame(data, f"one row per patient with the columns {list(spec.genes)} and {spec.clinical}")
        found = _survival_model_inputs(spec, table, data)
        count = len(table)
        try:
            rows = [int(i) for i in inputs] or list(range(1, min(4, count) + 1))
        except ValueError:
            raise DataError(f"expected row numbers (1-based) of {data} to explain, got {inputs}") from None
        bad = [i for i in rows if not 1 <= i <= count]
        if bad:
            raise DataError(f"row numbers {bad} are outside {data}, which has rows 1-{count}")
        for i in rows:
            yield f"row{i}", {k: v[i - 1:i] for k, v in found.items()}

    def example_input(self, card, size: int, generator: torch.Generator):
        """``clinical`` (B, clinical columns), ``genes`` (B, genes) standardised, ``gene_mask`` (B, genes) bool: True
        where a gene was measured."""
        spec = card.input_spec
        genes = torch.randn(size, len(spec["genes"]), generator=generator)
        return batch_axes({"clinical": torch.randn(size, len(spec["clinical"]), generator=generator), "genes": genes,
                           "gene_mask": torch.rand(size, len(spec["genes"]), generator=generator) < 0.9})

    def ood_values(self, inputs: dict[str, torch.Tensor]) -> np.ndarray:
        """The covariates (B, G + C): the genes (NaN where ``gene_mask`` is False), then the clinical values."""
        parts = [inputs["clinical"]]
        if inputs.get("genes") is not None:
            genes = inputs["genes"].float()
            parts.insert(0, genes.masked_fill(~inputs["gene_mask"], float("nan")) if inputs.get("gene_mask") is not None
                         else genes)
        return torch.cat([p.float() for p in parts], 1).detach().cpu().numpy()

    def transform(self, card) -> Callable[[Any], dict[str, torch.Tensor]]:
        """Patients' raw rows (a pandas DataFrame or CSV path with the card's gene and clinical columns, others
        ignored, or an (N, G + C) array in the card's column order, genes first, as the DeepSurv METABRIC file's
        ``x`` holds them; an empty gene cell is masked) -> the model's keyword inputs, standardised with the
        training mean and std: ``clinical`` (N, C) and, with genes, ``genes`` and ``gene_mask`` (N, G)."""
        spec = self.spec(card)
        return lambda rows: _survival_model_inputs(spec, rows, "the patients' rows")


def _cox_arrays(card) -> dict[str, Any]:
    """The arrays of the survival baseline kept with ``card`` (its predictor's baseline file, sha256 checked): the
    two members' validation risks that a blend ranks against, and CoxPH's fit or the forest's file's sha256."""
    found = blend_of(card)
    if found is None:
        raise DataError(f"the card of {card.name} predicts with its model; it keeps no CoxPH")
    _, path, sha256 = found
    return load_arrays(path, sha256, ("model_reference", "baseline_reference"))


def _survival_model_inputs(spec: SurvivalTableSpec, rows, source) -> dict[str, torch.Tensor]:
    """The model's keyword inputs of patients' raw ``rows`` (:func:`medical.io.survival_features`, then
    :func:`medical.io.survival_inputs`); no gene inputs for a model without genes."""
    x = survival_features(rows, list(spec.genes), clinical_columns(spec.clinical, spec.categories), source,
                          spec.categories)
    inputs = survival_inputs(x, spec.mean, spec.std, len(spec.genes))
    return inputs if spec.genes else {"clinical": inputs["clinical"]}


@dataclass(frozen=True)
class IcuStaysSpec(KindSpec):
    """An ICU model's input: ``hours`` hourly steps of the ``variables``, with the training statistics of
    :func:`medical.icu_data.stay_statistics` (clipping bounds, mean and std of the variables and descriptors)."""

    variables: list[str]
    hours: int
    low: list[float]
    high: list[float]
    mean: list[float]
    std: list[float]
    static_mean: list[float]
    static_std: list[float]


# the metric a from-scratch ICU run is stopped and kept on (the recipe files': val/auroc): see default_recipe
ICU_MONITOR = "val/loss"


@register_kind
class IcuStaysKind(InputKind):
    """ICU stays held as PhysioNet 2012 holds them (a folder of ``<RecordID>.txt`` records and an outcomes CSV:
    :func:`medical.icu_data.icu_stays_folder`); predicted one record file at a time (:meth:`predict`), explained by
    TFCAM's attention over the card's test stays. The baseline, a logistic regression on stay summaries
    (:mod:`medical.baselines`), is kept in a run folder as ``baseline.skops``, and ``finetune --predictor`` chooses
    among the model, it and their linear blend of class probabilities; a baseline or blend predictor is not exported
    (``attnhub export --model-only`` exports the network)."""

    name, domain, Spec = "icu_stays", "medical", IcuStaysSpec
    input_form = InputForm.FILE_EACH  # one stay per record file: serve batches requests into one model call
    tasks = ("classification",)  # the task of the ICU families, tfcam and icu_gru (the other domains name theirs)
    options = (
        KindOption("outcomes", "ICU stays: the outcomes CSV with RecordID and the label column, in the folder or a "
                   "path (default: the folder's one file named Outcomes*, such as Outcomes-a.txt)"),
        KindOption("label", "ICU stays: the 0/1 outcome column of the outcomes file (default: the card's, "
                   "In-hospital_death)"),
    )

    def finetune_data(self, card, path: str, outcomes: str | None = None, label: str | None = None
                      ) -> DataSection:
        """``attnhub finetune tfcam.physionet2012 --data FOLDER [--outcomes FILE] [--label COLUMN]``: the card's
        variables and hours (parameters it does not know are dropped and listed in the run's card; variables the
        stays never hold are missing throughout, which the model's observation mask carries); the label defaults
        to the card's, else ``In-hospital_death``."""
        spec, trained = self.spec(card), card.data.get("args", {})
        return DataSection(name="icu_stays_folder", args={
            "path": str(path), **({"outcomes": outcomes} if outcomes else {}),
            "label": label or trained.get("label", "In-hospital_death"), "variables": list(spec.variables),
            "hours": spec.hours, "batch_size": trained.get("batch_size", 64)})

    def default_recipe(self, family: str, path: str, outcomes: str | None = None, label: str | None = None
                       ) -> Recipe:
        """``attnhub finetune tfcam --data FOLDER [--outcomes FILE] [--label COLUMN]``: the stays' own time-series
        parameters define the input (48 hours); the family's PhysioNet 2012 recipe
        (``recipes/medical/FAMILY_physionet2012.yaml``: its model arguments and batch size, AdamW, a cosine schedule,
        at most 15 epochs, patience 5), but the epoch with the lowest validation loss (:data:`ICU_MONITOR`): a user's
        folder is small (800 stays: 80 validation stays, 11 deaths), where the AUROC moves with a single death and
        picked epoch 0 for one seed of three (test AUROC 0.642; with the loss 0.727, benchmarks/results/
        user_data.md)."""
        physionet = recipe_file(f"medical/{family}_physionet2012.yaml")
        data = DataSection(name="icu_stays_folder", args={
            "path": str(path), **({"outcomes": outcomes} if outcomes else {}),
            "batch_size": physionet.data.args["batch_size"], **({"label": label} if label else {})})
        return scratch_recipe(family, data, start=physionet, trainer=physionet.trainer.replace(monitor=ICU_MONITOR))

    def transform(self, card) -> Callable[[Any], dict[str, torch.Tensor]]:
        """A patient's raw PhysioNet 2012 record (the path of its ``set-a/<id>.txt`` file: ``Time,Parameter,Value``
        rows) -> the model's keyword inputs, one stay (:func:`medical.icu_data.stay_arrays` with the card's training
        statistics): ``values`` and ``mask`` (hours, variables) of the card's hours and variables (other parameters
        ignored), ``static`` (9,); batch stays with ``torch.utils.data.default_collate``."""
        spec = self.spec(card)
        stats = dataclasses.asdict(spec)

        def prepare(record) -> dict[str, torch.Tensor]:
            means, static_raw = read_record(record, list(spec.variables), spec.hours)
            return {k: torch.from_numpy(v[0]) for k, v in stay_arrays(means[None], static_raw[None], stats).items()}

        return prepare

    def explanation(self, card, model, inputs: dict[str, Any], target: int | None = None) -> Explanation:
        """TFCAM's attention on the variables, or Integrated Gradients (:func:`medical.explain.stay_explanation`)."""
        return stay_explanation(card, model, inputs["values"], inputs["mask"], inputs["static"], target)

    def explain_samples(self, card, inputs: list[str]) -> Iterator[tuple[str, dict[str, Any]]]:
        return stay_samples(card, inputs)

    def draw_explanation(self, card, inputs: dict[str, Any], explanation: Explanation, path: Path, title: str) -> None:
        """TFCAM's three levels (hours, variables, influence); bars of the attribution for ``--target``."""
        if "explained" not in explanation.extra:
            return super().draw_explanation(card, inputs, explanation, path, title)
        plot_tfcam_explanations(explanation.extra["explained"], explanation.labels, path, title=title)

    def example_input(self, card, size: int, generator: torch.Generator):
        """``values`` (B, hours, variables) scaled, last observation carried forward; ``mask`` (B, hours, variables)
        bool: observed that hour; ``static`` (B, admission descriptors)."""
        shape = (size, card.input_spec["hours"], len(card.input_spec["variables"]))
        return batch_axes({"values": torch.rand(shape, generator=generator),
                           "mask": torch.rand(shape, generator=generator) < 0.3,
                           "static": torch.randn(size, card.model_args["num_static"], generator=generator)})

    def predict(self, card, model, paths: Iterable[str], batch_size: int) -> Iterator[tuple[list[str], torch.Tensor]]:
        """``attnhub predict tfcam.physionet2012 132539.txt 132540.txt``: the logits (B, 2) of each record file
        (``set-a/<id>.txt``), named by its path, read by :meth:`transform` and batched as the model's keyword inputs;
        a file that is not a PhysioNet 2012 record raises naming it."""
        return predict_per_file(model, paths, self.transform(card), batch_size)

    def baseline(self, run_dir) -> BaselineResult:
        return logistic_regression_on_run_split(run_dir)

    def cross_validation(self, run_dir) -> CrossValidation | None:
        """Folds of a user's stays outside the test split, the logistic regression out of fold, the refit on every
        stay (:func:`medical.baselines.icu_cross_validation`); None for PhysioNet 2012's folds."""
        return icu_cross_validation(run_dir)

    def baseline_outputs(self, card, path: str) -> np.ndarray:
        """The kept logistic regression's class probabilities (1, 2) for the record file at ``path``, from the
        summaries of its hourly grid and its admission descriptors standardised with the card's training statistics,
        as in training (:func:`medical.baselines.logistic_regression_outputs`; ``baseline.skops``, sha256 and types
        checked)."""
        return logistic_regression_outputs(card, path)
