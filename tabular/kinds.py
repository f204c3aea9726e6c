"""The tabular input kind ``"table"``: ``attnhub finetune NAME --data my.csv [--target COLUMN]`` and
``attnhub predict NAME my.csv``, and for a tabular family with no pretrained tag a default recipe (the family's
default dimensions, AdamW, early stopping on the validation metric).

>>> TableKind().default_recipe("mlp", "my.csv", target="y").data
DataSection(name='tabular_csv', args={'path': 'my.csv', 'target': 'y', 'task': 'auto'})
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import torch

from hub.datafiles import row_numbers
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
    grouped_args,
    register_kind,
)
from hub.recipe import DataSection, EarlyStoppingSection, OptimizerSection, Recipe, TrainerSection, scratch_recipe
from tabular.baselines import baseline_outputs, gbdt_cross_validation, gbdt_on_run_split, skrub_on_run_split
from tabular.explain import cell_explanation, graph_samples, row_explanation, table_samples
from tabular.io import TabularPreprocessor, read_table, table_cells
from tabular.row_graph import RowGraphPreprocessor

# How a tabular family trains from scratch on a user's CSV (the recipe files are tuned per public dataset):
OPTIMIZER = OptimizerSection(name="adamw", lr=1e-3, weight_decay=1e-5)  # AdamW, light decay; lr per family below
LEARNING_RATES = {"mlp": 1e-3, "tabm": 2e-3, "tab_transformer": 1e-3, "tabr": 5e-4, "carte": 1e-3}
PRETRAIN_STEPS = 200  # CARTE from scratch: contrastive steps on the background tables first (about a minute)
# at most 50 epochs, stopped after 5 without a better validation metric, the best epoch tested
TRAINER = TrainerSection(max_epochs=50, early_stopping=EarlyStoppingSection(patience=5))


@dataclass(frozen=True)
class TableSpec(KindSpec):
    """A tabular model's input: the :class:`~tabular.io.TabularPreprocessor` fitted on the training split, as a
    dict (its columns, their types and transforms, the target)."""

    preprocessor: dict[str, Any]


@register_kind
class TableKind(InputKind):
    """CSV tables, one row per sample; the main kind of the tabular domain (its default recipe)."""

    name, domain, Spec = "table", "tabular", TableSpec
    tasks = ("tabular",)
    ood = OODProfile(input_scores=("range",), rows=True)
    input_form = InputForm.ROWS
    options = (
        KindOption("target", "tables: the column to predict (default: the pretrained card's target)"),
        KindOption("task", "tables: the kind of target (default auto: text or few whole numbers = classes, else "
                   "regression)", choices=("auto", "binary", "multiclass", "regression")),
        KindOption("groups", "tables: the column naming each row's group (patient, unit, site), not a feature. A group "
                   "stays whole in one of train/val/test and in one cross-validation fold (default: none)"),
    )

    def target_units(self, input_spec: dict[str, Any]) -> tuple[float, float]:
        """A regression target is standardised by the preprocessor (its ``target_std`` and ``target_mean``)."""
        pre = TableSpec.from_dict(input_spec, "a table's input_spec").preprocessor
        if pre.get("task") != "regression":
            return 1.0, 0.0
        return float(pre.get("target_std", 1.0)), float(pre.get("target_mean", 0.0))

    def finetune_data(self, card, path: str, target: str | None = None, task: str = "auto",
                      groups: str | None = None) -> DataSection:
        """``--data my.csv --target COLUMN [--task ...] [--groups COLUMN]``: the card's target column is the
        default."""
        spec = self.spec(card).preprocessor
        return DataSection(name="tabular_csv", args={"path": str(path), "target": target or spec["target"],
                                                     "task": task, **grouped_args(groups)})

    def predict(self, card, model, paths: Iterable[str], batch_size: int) -> Iterator[tuple[list[str], torch.Tensor]]:
        """Yield ``(row numbers, outputs)`` for the rows of each CSV: class logits, or regression values in the
        target's own units (the standardisation is undone)."""
        pre = TabularPreprocessor.from_dict(self.spec(card).preprocessor)
        for path in paths:
            x_num, x_cat = (torch.as_tensor(a) for a in pre.transform(read_table(path)))
            names = row_numbers(len(x_num))
            for start in range(0, len(x_num), batch_size):
                out = model(x_num[start:start + batch_size], x_cat[start:start + batch_size])
                if pre.task == "regression":
                    out = out * pre.target_std + pre.target_mean
                yield names[start:start + batch_size], out

    def transform(self, card) -> Callable[[Any], dict[str, torch.Tensor]]:
        """A table's rows (a pandas DataFrame, or a CSV path, with the training columns; the target column may be
        there and is ignored) -> ``{"x_num": (N, F), "x_cat": (N, C)}``, the model's keyword inputs. A regression
        model's outputs are the standardised target: ``out * target_std + target_mean`` is in its units."""
        pre = TabularPreprocessor.from_dict(self.spec(card).preprocessor)

        def prepare(rows) -> dict[str, torch.Tensor]:
            frame = read_table(rows) if isinstance(rows, (str, Path)) else rows
            x_num, x_cat = (torch.as_tensor(a) for a in pre.transform(frame))
            return {"x_num": x_num, "x_cat": x_cat}

        return prepare

    def explanation(self, card, model, inputs: dict[str, Any], target: int | None = None) -> Explanation:
        """Column attention, TabR's retrieval, or feature ablation (:func:`tabular.explain.row_explanation`)."""
        return row_explanation(card, model, inputs["x_num"], inputs["x_cat"], target)

    def explain_samples(self, card, inputs: list[str], data: str | None = None) -> Iterator[tuple[str, dict]]:
        return table_samples(card, inputs, data)

    def baseline(self, run_dir) -> BaselineResult:
        return gbdt_on_run_split(run_dir)

    def cross_validation(self, run_dir) -> CrossValidation:
        """Folds of the rows outside the test split, HistGradientBoosting out of fold, the refit on every row
        (:func:`tabular.baselines.gbdt_cross_validation`)."""
        return gbdt_cross_validation(run_dir)

    def example_input(self, card, size: int, generator: torch.Generator):
        """``x_num`` (B, numeric columns and missing indicators) float32, ``x_cat`` (B, categorical columns) int64
        codes below each column's cardinality."""
        cardinalities = torch.tensor(card.model_args["cat_cardinalities"], dtype=torch.float64)
        codes = (torch.rand(size, len(cardinalities), generator=generator, dtype=torch.float64) * cardinalities).long()
        return batch_axes({"x_num": torch.randn(size, card.model_args["num_numeric"], generator=generator),
                           "x_cat": codes})

    def ood_rows(self, frame, card_spec: dict[str, Any]):
        """The numeric cells and unseen rows of the raw ``frame`` (:func:`tabular.io.table_cells`)."""
        return table_cells(frame, card_spec["preprocessor"])

    def baseline_outputs(self, card, path: str):
        """HistGradientBoosting's outputs for the rows of the CSV at ``path``, read back from the card's
        ``baseline.skops`` (:func:`tabular.baselines.baseline_outputs`)."""
        return baseline_outputs(card, path)

    def scratch_data(self, path: str, target: str, task: str, groups: str | None) -> DataSection:
        """The data section of :meth:`default_recipe` (a subclass's hook)."""
        return DataSection(name="tabular_csv", args={"path": str(path), "target": target, "task": task,
                                                     **grouped_args(groups)})

    def default_recipe(self, family: str, path: str, target: str | None = None, task: str = "auto",
                       groups: str | None = None) -> Recipe:
        if target is None:
            raise DataError(f"training {family!r} from scratch on {path} needs --target COLUMN (the column to predict)")
        return scratch_recipe(family, self.scratch_data(path, target, task, groups),
                              optimizer=OPTIMIZER.replace(lr=LEARNING_RATES.get(family, OPTIMIZER.lr)), trainer=TRAINER)


@register_kind
class RowGraphKind(TableKind):
    """CSV tables read as CARTE's row graphs (:mod:`tabular.row_graph`): the same files and options as ``table``,
    the cells embedded (column name and value) instead of coded; the default recipe of the ``table-graph`` families.
    The range check reads the numeric cells only: a text value never seen in training is what CARTE's embeddings
    are for, not a sign of a row out of distribution."""

    name, Spec = "carte_table", TableSpec
    tasks = ("table-graph",)

    def finetune_data(self, card, path: str, target: str | None = None, task: str = "auto",
                      groups: str | None = None) -> DataSection:
        spec = self.spec(card).preprocessor
        return DataSection(name="carte_csv", args={"path": str(path), "target": target or spec["target"],
                                                   "task": task, "embedder": spec["embedder"], **grouped_args(groups)})

    def _graphs(self, card, frame) -> dict[str, torch.Tensor]:
        pre = RowGraphPreprocessor.from_dict(self.spec(card).preprocessor)
        values, columns, mask = (torch.as_tensor(a) for a in pre.transform(frame))
        return {"values": values, "columns": columns, "mask": mask}

    def predict(self, card, model, paths: Iterable[str], batch_size: int) -> Iterator[tuple[list[str], torch.Tensor]]:
        """Yield ``(row numbers, outputs)`` for the rows of each CSV: class logits, or values in the target's units."""
        std, mean = self.target_units(card.input_spec)
        for path in paths:
            graphs = self._graphs(card, read_table(path))
            names = row_numbers(len(graphs["values"]))
            for start in range(0, len(names), batch_size):
                rows = slice(start, start + batch_size)
                out = model(graphs["values"][rows], graphs["columns"], graphs["mask"][rows])
                yield names[rows], out * std + mean

    def transform(self, card) -> Callable[[Any], dict[str, torch.Tensor]]:
        """A table's rows (a DataFrame or a CSV path with the training columns) -> ``{"values": (N, L, 100),
        "columns": (L, 100), "mask": (N, L)}``, the model's keyword inputs (a regression's outputs standardised)."""
        def prepare(rows) -> dict[str, torch.Tensor]:
            return self._graphs(card, read_table(rows) if isinstance(rows, (str, Path)) else rows)

        return prepare

    def explanation(self, card, model, inputs: dict[str, Any], target: int | None = None) -> Explanation:
        """The centre node's attention to each cell (:func:`tabular.explain.cell_explanation`)."""
        return cell_explanation(card, model, inputs, target)

    def explain_samples(self, card, inputs: list[str], data: str | None = None) -> Iterator[tuple[str, dict]]:
        return graph_samples(card, inputs, data)

    def baseline(self, run_dir) -> BaselineResult:
        return skrub_on_run_split(run_dir)

    def cross_validation(self, run_dir) -> None:
        """None: the choice is made on the validation split (the skrub baseline is not kept as a predictor)."""
        return None

    def example_input(self, card, size: int, generator: torch.Generator):
        """``values`` (B, L, 100), ``columns`` (B, L, 100) (the same for each row), ``mask`` (B, L) bool, for the L
        columns of the card."""
        pre = self.spec(card).preprocessor
        count, width = len(pre["numeric"]) + len(pre["categorical"]), card.model_args.get("embed_dim", 100)
        columns = torch.randn(1, count, width, generator=generator).expand(size, -1, -1).contiguous()
        return batch_axes({"values": torch.randn(size, count, width, generator=generator), "columns": columns,
                           "mask": torch.ones(size, count, dtype=torch.bool)})

    def ood_rows(self, frame, card_spec: dict[str, Any]):
        """The numeric cells of the raw ``frame`` (:func:`tabular.io.table_cells`; text cells are not checked)."""
        return table_cells(frame, {**card_spec["preprocessor"], "categorical": [], "categories": []})

    def baseline_outputs(self, card, path: str):
        raise DataError(f"the card of {card.name} predicts with its model; the carte_table kind keeps no baseline")

    def scratch_data(self, path: str, target: str, task: str, groups: str | None) -> DataSection:
        """The CSV as row graphs, pretraining on the background tables first."""
        return DataSection(name="carte_csv", args={"path": str(path), "target": target, "task": task,
                                                   "pretrain_steps": PRETRAIN_STEPS, **grouped_args(groups)})
