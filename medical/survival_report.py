"""The survival report of a trained model: test Harrell's C with its bootstrap interval, Uno's C, time-dependent
AUC, integrated Brier score and the median-risk Kaplan-Meier plot with its log-rank p.

``survival_report(run_or_tag)`` rebuilds the data its card names, scores the training, validation and test
parts and writes ``survival_report.json`` and ``risk_groups.png`` into the run folder (or ``out_dir``). The
survival functions behind the Brier score come from the validation part, which the network did not fit
(:func:`~medical.survival_metrics.calibrated_survival`); without one, from the Breslow estimator on the training
risks.

>>> report = survival_report("survival_fusion.metabric", out_dir="/tmp/report")  # doctest: +SKIP
>>> sorted(report["test"])  # doctest: +SKIP
['harrell_c', 'harrell_c_ci95', 'ibs', 'logrank_p', 'mean_auc', 'uno_c']
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader

from hub.io import atomic_write_bytes
from medical.survival_metrics import harrell_c_interval, risk_group_plot, survival_metrics


@torch.inference_mode()
def predict_risk(model: torch.nn.Module, dataset) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(risk, time, event) over a survival dataset, each (N,)."""
    model.eval()
    risks, targets = [], []
    for inputs, target in DataLoader(dataset, batch_size=4096):
        risks.append(model(**inputs).reshape(-1))  # (B,)
        targets.append(target)  # (B, 2)
    target = torch.cat(targets).numpy()
    return torch.cat(risks).numpy(), target[:, 0], target[:, 1]


def survival_report(name: str, out_dir: str | None = None) -> dict[str, Any]:
    """Metrics and risk-group plot of a run folder or pretrained tag on the test part of its data."""
    from hub.core.registry import get_dataset_entry
    from hub.models import load, model_card
    from hub.recipe import check_builder_args

    card = model_card(name)
    entry = get_dataset_entry(card.data["name"])
    data = entry.builder(**check_builder_args(entry.builder, card.data.get("args", {}), "data.args"))
    data.setup("test")
    model = load(name)
    train_risk, train_time, train_event = predict_risk(model, data.train_set)
    risk, time, event = predict_risk(model, data.test_set)
    calibration = None
    if len(data.val_set):
        val_risk, val_time, val_event = predict_risk(model, data.val_set)
        calibration = (val_time, val_event, val_risk)
    folder = Path(out_dir) if out_dir else Path(name)
    folder.mkdir(parents=True, exist_ok=True)
    test = survival_metrics(train_time, train_event, train_risk, time, event, risk, calibration=calibration)
    test["harrell_c_ci95"] = list(harrell_c_interval(time, event, risk))
    test["logrank_p"] = risk_group_plot(time, event, risk, folder / "risk_groups.png", title=card.name)
    report = {"model": card.name, "data": card.data["name"], "test": test,
              "c_index": "harrell_c: Harrell's C, harrell_c_ci95 its 95% percentile bootstrap interval over the test "
                          "patients (1000 resamples); uno_c: Uno's C (IPCW, tau = 90th percentile of training times)"}
    atomic_write_bytes(folder / "survival_report.json", (json.dumps(report, indent=2) + "\n").encode())
    return report
