"""Do RUL forecasts degrade honestly under sensor drift? On every window of C-MAPSS FD001's test units, as recorded
and with :func:`benchmarks.uncertainty.drifting_sensors` applied, three forecasts of the RUL now: the shipped
``rul_attention.fd001``; the same model read with its 90% conformal interval and OOD flag (a forecast counts as
confident only when its interval's lower bound is high and it is not flagged); gradient boosting on window
statistics, trained on the same training units. Per model: RMSE, and how often it calls a failing unit
confidently healthy. Writes ``benchmarks/results/rul_shift.md``.

    HUB_DATA_DIR=../shared/data python -m benchmarks.rul_shift
"""
from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset

import hub
from benchmarks import RESULTS
from benchmarks.uncertainty import drifting_sensors
from hub.io import atomic_write_bytes
from hub.recipe import card_data
from hub.uncertainty import ood
from hub.uncertainty.conformal import interval_columns

TAG = "rul_attention.fd001"
FAILING_RUL = 30  # true RUL (cycles) at or below which a unit is failing
HEALTHY_RUL = 80  # predicted RUL above which a forecast says "healthy"
HEALTHY_LOWER = 60  # the interval's lower bound above which the model with an interval is sure of it


def window_statistics(x: torch.Tensor) -> np.ndarray:
    """Per sensor of windows (N, T, S): last value, mean, standard deviation, min, max and least-squares slope
    over the window -> (N, 6 S)."""
    t = torch.linspace(-1, 1, x.shape[1])[None, :, None]
    slope = (x * t).sum(1) / (t * t).sum()
    return torch.cat([x[:, -1], x.mean(1), x.std(1), x.amin(1), x.amax(1), slope], 1).numpy()


def test_windows(data) -> tuple[torch.Tensor, np.ndarray]:
    """Every window of the test units (N, T, S) and its true RUL now (N,), capped as the test split caps it."""
    xs, ys = [], []
    for unit, series in data.test_units.items():
        windows = np.lib.stride_tricks.sliding_window_view(series, data.window, axis=0).transpose(0, 2, 1)
        xs.append(windows)
        ys.append(np.arange(len(windows))[::-1] + data.test_rul_at_end[unit])
    return torch.from_numpy(np.ascontiguousarray(np.concatenate(xs))), np.minimum(np.concatenate(ys),
                                                                                 data.test_rul_cap())


@torch.no_grad()
def attention_forecasts(model, x: torch.Tensor) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The model's RUL now (N,), its 90% interval's lower bound (N,) and its OOD flag (N,)."""
    card = model.pretrained_cfg
    detector = ood.load_detector(card)
    outputs = torch.cat([model(b) for b in x.split(512)])  # (N, outputs)
    rul, lower = interval_columns(card, list(card.output_names), outputs)[1][:, :2].numpy().T
    flags = detector.flag(ood.score_inputs(model, card, detector, DataLoader(TensorDataset(x, torch.zeros(len(x))),
                                                                             batch_size=512)))
    return rul, lower, flags


def rows(name: str, true: np.ndarray, predicted: np.ndarray, confident: np.ndarray) -> str:
    failing = true <= FAILING_RUL
    wrong = failing & confident
    rmse = float(np.sqrt(np.mean((predicted - true) ** 2)))
    return f"| {name} | {rmse:.1f} | {wrong.sum()} of {failing.sum()} ({wrong.sum() / failing.sum():.1%}) |"


def main() -> None:
    from sklearn.ensemble import HistGradientBoostingRegressor

    model = hub.load(TAG).eval()
    data = card_data(model.pretrained_cfg)
    data.setup("fit")
    train_x, train_y = data.train_set.tensors
    boosting = HistGradientBoostingRegressor(random_state=0).fit(window_statistics(train_x), train_y[:, 0].numpy())
    conformal = model.pretrained_cfg.calibration["conformal"]
    edges, half_widths = conformal["bin_edges"][0], conformal["half_width"]["0.9"][0]
    x, true = test_windows(data)
    shifted = drifting_sensors(x, torch.Generator().manual_seed(0))
    lines = ["# RUL forecasts under sensor drift", "",
             f"Written by `python -m benchmarks.rul_shift`. Every window of the {len(data.test_units)} C-MAPSS FD001 "
             f"test units ({len(x)} windows of {data.window} cycles; true RUL capped at {data.test_rul_cap():g}), as "
             "recorded and with drifting sensors (each sensor drifts up or down by half its training range over the "
             "window, as in `benchmarks/uncertainty.py`). Gradient boosting: scikit-learn's "
             "HistGradientBoostingRegressor on each sensor's last value, mean, standard deviation, min, max and "
             f"slope over the window, trained on the windows of the same {len(data.info['units']['train'])} "
             "training units as the attention model.", "",
             f"**Failing**: true RUL <= {FAILING_RUL} cycles. **Confidently healthy**: predicted RUL > "
             f"{HEALTHY_RUL}; for the model with interval and flag also the 90% interval's lower bound > "
             f"{HEALTHY_LOWER} (Mondrian split conformal: half widths "
             f"{', '.join(f'{w:.1f}' for w in half_widths)} cycles in the bins of the predicted RUL split at "
             f"{', '.join(f'{e:.1f}' for e in edges)}; with the prediction above {HEALTHY_RUL}, the bound adds little "
             "to the prediction's own threshold; the flag does the work) and not flagged out of distribution. The "
             "last column: failing windows called confidently healthy.", ""]
    for name, inputs in (("as recorded", x), ("drifting sensors", shifted)):
        rul, lower, flags = attention_forecasts(model, inputs)
        boosted = boosting.predict(window_statistics(inputs))
        lines += [f"## {name}", "", f"Flagged out of distribution: {flags.mean():.1%} of {len(flags)} windows.", "",
                  "| model | RMSE (cycles) | failing called confidently healthy |", "|---|---:|---:|",
                  rows(TAG, true, rul, rul > HEALTHY_RUL),
                  rows(f"{TAG}, 90% interval and OOD flag", true, rul,
                       (rul > HEALTHY_RUL) & (lower > HEALTHY_LOWER) & ~flags),
                  rows("gradient boosting on window statistics", true, boosted, boosted > HEALTHY_RUL), ""]
        print("\n".join(lines[-6:]), flush=True)
    atomic_write_bytes(RESULTS / "rul_shift.md", ("\n".join(lines).rstrip() + "\n").encode())
    print(f"wrote {RESULTS / 'rul_shift.md'}")


if __name__ == "__main__":
    main()
