"""The medical input kinds: ``survival_table`` (a CSV of patients for the survival models) and ``icu_stays``
(PhysioNet 2012 stays, explained by TFCAM's attention)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np
import torch

from hub.data import read_csv_frame
from hub.errors import DataError
from hub.kinds import InputKind, KindSpec, register_kind
from medical.explain import explain_stays
from medical.io import feature_matrix


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
        genes, clinical = list(spec.genes), list(spec.clinical)
        mean, std = np.asarray(spec.mean), np.asarray(spec.std)
        for path in paths:
            table = read_csv_frame(path, f"one row per patient with the columns {genes + clinical}")
            missing = [c for c in genes + clinical if c not in table.columns]
            if missing:
                raise DataError(f"{path}: missing columns {missing}; {card.name} takes {genes + clinical}")
            z = (feature_matrix(table, Path(path), genes, clinical) - mean) / std  # (N, G + C)
            names = (table["id"].astype(str).tolist() if "id" in table.columns
                     else [f"{path}:{line}" for line in range(2, len(table) + 2)])
            for start in range(0, len(z), batch_size):
                chunk = torch.as_tensor(z[start:start + batch_size], dtype=torch.float32)
                inputs = {"clinical": chunk[:, len(genes):]}
                if genes:
                    inputs.update(genes=chunk[:, :len(genes)].nan_to_num(), gene_mask=~chunk[:, :len(genes)].isnan())
                yield names[start:start + batch_size], model(**inputs)


@dataclass(frozen=True)
class IcuStaysSpec(KindSpec):
    """An ICU model's input: ``hours`` hourly steps of the ``variables``."""

    variables: list[str]
    hours: int


@register_kind
class IcuStaysKind(InputKind):
    """PhysioNet 2012 ICU stays; explained by TFCAM's attention over the card's test stays."""

    name, domain, Spec = "icu_stays", "medical", IcuStaysSpec

    def explain(self, card, model, inputs: list[str], out_dir: Path) -> Iterator[Path]:
        return explain_stays(card, model, inputs, out_dir)
