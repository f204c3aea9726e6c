"""Issue 68: what drives the RUL error under a shift, sensor by sensor. On every window of C-MAPSS FD001's test units,
the shipped ``rul_attention.fd001`` and gradient boosting on window statistics (trained on the same training units)
with ONE sensor at a time moved out of its training range (a constant offset of ``--offset`` times its training
range: an operating condition or fault mode the training engines did not show in that sensor), then every sensor
at once. For the model, three readings of the same forecast: as it answers, with its inputs clipped to the training
range ([0, 1] after the card's min-max scaling), and with its RUL clipped to the training target's range [0, cap].
Writes ``benchmarks/results/rul_sensor_shift.md``.

    HUB_DATA_DIR=../shared/data python -m benchmarks.rul_sensor_shift [--offset 0.5]
"""
from __future__ import annotations

import argparse

import numpy as np
import torch

import hub
from benchmarks import RESULTS
from benchmarks.rul_shift import TAG, test_windows, window_statistics
from hub.io import atomic_write_bytes
from hub.recipe import card_data


def rmse(predicted: np.ndarray, true: np.ndarray) -> float:
    return float(np.sqrt(np.mean((predicted - true) ** 2)))


@torch.no_grad()
def rul_now(model, x: torch.Tensor) -> np.ndarray:
    """The model's RUL now (N,) for windows (N, T, S)."""
    return torch.cat([model(b)[:, 0] for b in x.split(1024)]).numpy()


def main() -> None:
    from sklearn.ensemble import HistGradientBoostingRegressor

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--offset", type=float, default=0.5, help="the shift, in training ranges (default 0.5)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    model = hub.load(TAG).eval()
    card = model.pretrained_cfg
    cap = float(card.input_spec["rul_cap"])
    data = card_data(card)
    data.setup("fit")
    train_x, train_y = data.train_set.tensors
    boosting = HistGradientBoostingRegressor(random_state=0).fit(window_statistics(train_x), train_y[:, 0].numpy())
    x, true = test_windows(data)
    sensors = list(card.input_spec["sensors"])
    cases = [("none (as recorded)", None), *((s, [i]) for i, s in enumerate(sensors)),
             ("every sensor", list(range(len(sensors))))]
    lines = ["# RUL error under a one-sensor shift, sensor by sensor (issue 68)", "",
             f"Written by `python -m benchmarks.rul_sensor_shift --offset {args.offset:g}`. Every window of the "
             f"{len(data.test_units)} C-MAPSS FD001 test units ({len(x)} windows; true RUL capped at "
             f"{data.test_rul_cap():g}), with the named sensor offset by +{args.offset:g} of its training range (its "
             "min-max scaled value moved up by that much over the whole window), one sensor at a time, then all. "
             "RMSE in cycles of the RUL now. `inputs clipped`: the model reads its scaled inputs clipped to the "
             f"training range [0, 1]; `RUL clipped`: its forecast clipped to the training target's range [0, "
             f"{cap:g}]. Gradient boosting: HistGradientBoostingRegressor on window statistics (last, mean, std, min, "
             "max, slope per sensor) of the same training units.", "",
             "| shifted sensor | model | model, inputs clipped | model, RUL clipped | model, both | "
             "gradient boosting | model's RUL out of [0, cap] |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, which in cases:
        shifted = x.clone()
        if which is not None:
            shifted[:, :, which] += args.offset
        raw = rul_now(model, shifted)
        clipped_inputs = rul_now(model, shifted.clamp(0.0, 1.0))
        boosted = boosting.predict(window_statistics(shifted))
        outside = float(np.mean((raw < 0) | (raw > cap)))
        lines.append(f"| {name} | {rmse(raw, true):.1f} | {rmse(clipped_inputs, true):.1f} | "
                     f"{rmse(np.clip(raw, 0, cap), true):.1f} | {rmse(np.clip(clipped_inputs, 0, cap), true):.1f} | "
                     f"{rmse(boosted, true):.1f} | {outside:.1%} |")
        print(lines[-1], flush=True)
    atomic_write_bytes(RESULTS / "rul_sensor_shift.md", ("\n".join(lines).rstrip() + "\n").encode())
    print(f"wrote {RESULTS / 'rul_sensor_shift.md'}")


if __name__ == "__main__":
    main()
