"""Classic baselines of the time-series tasks, on a run's own split for the report that ``attnhub finetune`` prints.

* RUL: scikit-learn's HistGradientBoosting (default settings) on window statistics, per sensor the last value, mean,
  standard deviation and least-squares slope over the window, fitted on the training windows to the RUL now;
  scored on the test windows with the task's names (``test/rmse``, ``test/mae``, ``test/score``: the NASA score).
  With the run's model, also the :class:`~hub.kinds.PredictorData` from which ``finetune`` chooses the run's
  predictor (:mod:`hub.predictor`) on the RUL now of the validation windows; the baseline forecasts the later
  cycles as the targets run, ``clip(rul - h, 0, cap)`` (:func:`rul_forecast`), so a blend mixes every output. The
  fitted regressor is kept as ``baseline.skops``, read back only through :data:`TRUSTED_TYPES`. The predictor data
  carry near-shift evidence (:func:`perturbed_sensors`: the validation windows with every sensor offset by a constant
  per window), from which ``finetune`` chooses the member that answers the windows ``predict`` flags out of
  distribution (:func:`hub.predictor.guard_entry`).
* Traffic: the last value (the last reading of the input window, carried over every output step) and the
  historical average (the mean of the training speeds at the same time of day). The one with the lower masked MAE
  over all steps on the validation split (the task's ``val/mae``) is the baseline; the other's test metrics are
  kept beside it under its name (``historical average test/mae``, ...). With the run's model, also the
  :class:`~hub.kinds.PredictorData` from which ``finetune`` chooses the run's predictor, on every output step of
  every sensor of the validation windows, in mph, with missing readings (zero speeds) as NaN labels, left out as
  the task's masked metrics leave them (its RMSE is the choice's metric). The time-of-day profile and which of the
  two forecasts is kept are saved as ``baseline.safetensors`` (:data:`TRAFFIC_ARRAYS`);
  ``predict`` forecasts from a speeds file's last input window and the slots of the day after its last row
  (:func:`kept_traffic_forecast`).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import torch

from hub.errors import HubError
from hub.kinds import BaselineResult, CrossValidation, PredictorData
from hub.predictor import (
    HIST_GRADIENT_BOOSTING_TYPES,
    blend_of,
    load_arrays,
    load_skops,
    model_outputs,
    save_arrays,
    save_skops,
)
from timeseries.data import RULWindowData, TrafficSeriesData
from timeseries.signals import STEP_S, spectral_baseline
from timeseries.tasks import TrafficForecastTask, masked_mae, nasa_score_terms

RUL_BASELINE = "HistGradientBoosting on window statistics"
RUL_FILE = "baseline.skops"
TRUSTED_TYPES = HIST_GRADIENT_BOOSTING_TYPES  # a kept regressor holding any other type is refused
# the RUL guard's near shift (perturbed_sensors): each sensor of a validation window offset by a constant drawn from
# N(0, SHIFT_STD^2) of its training range (the windows are min-max scaled), one per window and sensor
SHIFT_STD, SHIFT_SEED = 0.25, 0
TRAFFIC_FILE = "baseline.safetensors"
TRAFFIC_METHODS = ("historical_average", "last_value")  # the kept ``method`` indexes these
TRAFFIC_ARRAYS = ("profile", "method")  # the time-of-day profile (steps per day, N), the method's index (1,)


def _run_data(run_dir):
    """The set-up data module of a finished run (its resolved recipe rebuilds the split) and the run's seed."""
    from hub.recipe import load_recipe
    from hub.run.train import build_data

    recipe = load_recipe(Path(run_dir) / "recipe.yaml")
    return build_data(recipe), recipe.seed


def window_statistics(windows: np.ndarray) -> np.ndarray:
    """Per sensor: the last value, mean, standard deviation and least-squares slope over the window.

    Shapes: (W, T, S) -> (W, 4 S), the four statistics of every sensor in that order.

    >>> window_statistics(np.arange(6.0).reshape(1, 3, 2)).tolist()
    [[4.0, 5.0, 2.0, 3.0, 1.632993161855452, 1.632993161855452, 2.0, 2.0]]
    """
    t = np.arange(windows.shape[1]) - (windows.shape[1] - 1) / 2
    slope = np.einsum("t,wts->ws", t, windows) / np.square(t).sum()
    return np.concatenate([windows[:, -1], windows.mean(1), windows.std(1), slope], 1)


def rul_baseline(data: RULWindowData, seed: int = 0, model=None) -> BaselineResult:
    """HistGradientBoosting on :func:`window_statistics` of a set-up RUL data module: fitted on the training windows
    (the RUL now, capped as the model's targets), scored on the test windows; predictions per test window, named by
    unit and last cycle. With ``model`` (the run's, loaded), also the predictor data of both
    (:func:`rul_predictor_data`)."""
    x, y = (t.numpy() for t in data.train_set.tensors)
    estimator = _fit_rul_estimator(x, y, seed)
    x_test, y_test = (t.numpy() for t in data.test_set.tensors)
    pred, target = estimator.predict(window_statistics(x_test.astype(np.float64))), y_test[:, 0].astype(np.float64)
    metrics = {"test/rmse": float(np.sqrt(np.mean((pred - target) ** 2))),
               "test/mae": float(np.mean(np.abs(pred - target))),
               "test/score": float(nasa_score_terms(torch.from_numpy(pred), torch.from_numpy(target)).sum())}
    result = BaselineResult(RUL_BASELINE, metrics, {**data.test_windows, "target": target.tolist(),
                                                    "prediction": pred.tolist()})
    if model is None:
        return result
    return dataclasses.replace(result, predictor=rul_predictor_data(data, model, estimator))


def rul_predictor_data(data: RULWindowData, model, estimator) -> PredictorData:
    """The RUL now (the first output, the one the run is scored on) of the validation and test windows: its target,
    the run's ``model``'s forecast and the fitted ``estimator``'s, with every output of the horizon for the
    predictor's intervals (``outputs``: the estimator's forecast as ``predict`` gives it, :func:`rul_forecast`), and
    how to save the estimator into a run folder (:data:`RUL_FILE`)."""
    splits = {"val": data.val_set, "test": data.test_set}
    labels = {k: d.tensors[1].numpy().astype(np.float64) for k, d in splits.items()}  # (N, horizon)
    ours = {k: model_outputs(model, d) for k, d in splits.items()}
    windows = {k: d.tensors[0].numpy().astype(np.float64) for k, d in splits.items()}
    theirs = {k: rul_forecast(estimator, w, labels[k].shape[1], data.rul_cap) for k, w in windows.items()}
    shifted = perturbed_sensors(windows["val"])
    shifted_set = torch.utils.data.TensorDataset(torch.as_tensor(shifted, dtype=torch.float32), data.val_set.tensors[1])
    return PredictorData(
        task="regression", labels={k: v[:, 0] for k, v in labels.items()}, model={k: v[:, 0] for k, v in ours.items()},
        baseline={k: estimator.predict(window_statistics(w)) for k, w in windows.items()},
        save=lambda run_dir: save_skops(estimator, Path(run_dir) / RUL_FILE),
        outputs={"labels": labels, "model": ours, "baseline": theirs},
        shift={"labels": labels["val"][:, 0], "model": model_outputs(model, shifted_set)[:, 0],
               "baseline": estimator.predict(window_statistics(shifted)),
               "how": f"the validation units' windows with each sensor offset by a constant drawn from N(0, "
                      f"{SHIFT_STD:g}^2) of its training range per window (seed {SHIFT_SEED}): an operating "
                      "condition or fault mode the training units did not show"})


def rul_cross_validation(run_dir) -> CrossValidation:
    """The choice by folds of a RUL run on sensor units (:class:`hub.kinds.CrossValidation`): folds of the training
    and validation windows grouped by unit (``data.args.cv_fold``: a unit's windows all train or all validate),
    HistGradientBoosting on window statistics out of fold, the guard's near shift out of fold (each fold run's model
    and that fold's regressor on its validation windows, sensors perturbed: :func:`perturbed_sensors`), and the
    refit on every unit (``data.args.refit``). Compared on the RUL now (the first output), in cycles."""
    from hub.models import load
    from hub.recipe import load_recipe

    recipe = load_recipe(Path(run_dir) / "recipe.yaml")
    data, seed = _run_data(run_dir)
    data.setup()
    pooled = [data.train_set, data.val_set]  # the folded windows, in the order the folds index them
    labels = np.concatenate([part.tensors[1][:, 0].numpy() for part in pooled]).astype(np.float64)

    def fold_data(fold_dir):
        fold, _ = _run_data(fold_dir)
        fold.setup()
        return fold

    def fit(part):
        x, y = (t.numpy() for t in part.tensors)
        return _fit_rul_estimator(x, y, seed)

    def fold_outputs(fold_dir):
        return model_outputs(load(str(fold_dir)), fold_data(fold_dir).val_set)[:, 0]

    def baselines(folds, fold_seed):
        out = np.full(len(labels), np.nan)
        for index, (_, held) in enumerate(folds):
            fold = _folded(recipe, len(folds), index, fold_seed)
            out[held] = fit(fold.train_set).predict(window_statistics(_windows_of(fold.val_set)))
        return {RUL_BASELINE: out}

    def near_shift(fold_runs, folds, fold_seed, _):
        model, baseline = np.full(len(labels), np.nan), np.full(len(labels), np.nan)
        for (_, held), fold_dir in zip(folds, fold_runs):
            fold = fold_data(fold_dir)
            shifted = perturbed_sensors(_windows_of(fold.val_set))
            shifted_set = torch.utils.data.TensorDataset(torch.as_tensor(shifted, dtype=torch.float32),
                                                         fold.val_set.tensors[1])
            model[held] = model_outputs(load(str(fold_dir)), shifted_set)[:, 0]
            baseline[held] = fit(fold.train_set).predict(window_statistics(shifted))
        return {"labels": labels, "model": model, "baseline": baseline,
                "how": f"each fold's validation units' windows with each sensor offset by a constant drawn from N(0, "
                       f"{SHIFT_STD:g}^2) of its training range per window (seed {SHIFT_SEED}), scored by the fold "
                       "run's model and the regressor fitted without the fold: an operating condition or fault mode "
                       "the training units did not show"}

    def test(_):
        merged = [torch.cat(t) for t in zip(*(part.tensors for part in pooled))]
        estimator = _fit_rul_estimator(merged[0].numpy(), merged[1].numpy(), seed)
        return (data.test_set.tensors[1][:, 0].numpy().astype(np.float64),
                model_outputs(load(str(run_dir)), data.test_set)[:, 0],
                estimator.predict(window_statistics(_windows_of(data.test_set))))

    def refit(_, out_dir):
        return save_skops(fit(fold_data(out_dir).train_set), Path(out_dir) / RUL_FILE)

    return CrossValidation(
        task="regression", labels=labels, label_names=None, groups=data.pool_units,
        fold_overrides=lambda k, index, fold_seed: [f"data.args.cv_fold=[{k},{index},{fold_seed}]"],
        refit_overrides=["data.args.refit=true"], fold_outputs=fold_outputs, baselines=baselines,
        test=test if len(data.test_set) else None, refit=refit, near_shift=near_shift)


def _fit_rul_estimator(x: np.ndarray, y: np.ndarray, seed: int):
    """HistGradientBoosting on :func:`window_statistics` of scaled windows ``x`` (W, T, S), fitted to the RUL now
    ``y[:, 0]``."""
    from sklearn.ensemble import HistGradientBoostingRegressor

    return HistGradientBoostingRegressor(random_state=seed).fit(window_statistics(x.astype(np.float64)), y[:, 0])


def _windows_of(part) -> np.ndarray:
    """A windows dataset's inputs as float64 (W, T, S)."""
    return part.tensors[0].numpy().astype(np.float64)


def _folded(recipe, k: int, index: int, seed: int):
    """The set-up data module of fold ``index`` of ``k`` of ``recipe``'s data."""
    from hub.recipe import apply_overrides, validate_recipe
    from hub.run.train import build_data

    fold = build_data(validate_recipe(apply_overrides(recipe.to_dict(), [f"data.args.cv_fold=[{k},{index},{seed}]"]),
                                      f"fold {index}"))
    fold.setup()
    return fold


def perturbed_sensors(windows: np.ndarray, std: float | None = None, seed: int | None = None) -> np.ndarray:
    """The near shift of the RUL guard's evidence: min-max scaled ``windows`` (W, T, S) with each sensor of each
    window offset by one constant, drawn from N(0, ``std``^2) (in training ranges; default :data:`SHIFT_STD`, seed
    :data:`SHIFT_SEED`). Shapes: (W, T, S) -> (W, T, S)."""
    rng = np.random.default_rng(SHIFT_SEED if seed is None else seed)
    offsets = rng.normal(0.0, SHIFT_STD if std is None else std, (windows.shape[0], 1, windows.shape[2]))
    return windows + offsets


def rul_forecast(estimator, windows: np.ndarray, horizon: int, rul_cap: float) -> np.ndarray:
    """The fitted regressor's forecast for scaled ``windows``: its RUL now, then one cycle less per later cycle,
    within ``[0, rul_cap]`` as the targets are (:func:`timeseries.data.rul_targets`).

    Shapes: (W, T, S) -> (W, horizon)."""
    now = estimator.predict(window_statistics(windows.astype(np.float64)))
    return np.clip(now[:, None] - np.arange(horizon)[None, :], 0.0, rul_cap)


def kept_rul_estimator(card):
    """The HistGradientBoosting regressor kept with ``card`` (its predictor's baseline file; sha256 and types
    checked)."""
    found = blend_of(card)
    if found is None:
        raise HubError(f"the card of {card.name} predicts with its model; it keeps no baseline")
    _, path, sha256 = found
    return load_skops(path, sha256, TRUSTED_TYPES)


def rul_baseline_on_run_split(run_dir) -> BaselineResult:
    """:func:`rul_baseline` on the split of the run in ``run_dir``, with the predictor data of it and the run's
    model (the weights it tested)."""
    from hub.models import load

    return rul_baseline(*_run_data(run_dir), model=load(str(run_dir)))


def time_of_day_profile(speed: np.ndarray, slots: np.ndarray, steps_per_day: int) -> np.ndarray:
    """The historical average's fitted state: per slot of the day and sensor, the mean of the readings ``speed``
    (T, N) (zero speeds are missing readings, left out) at ``slots`` (T,), each in ``[0, steps_per_day)``; a
    sensor's mean over every slot where a slot has no reading.

    Shapes: (T, N), (T,) -> (steps_per_day, N).

    >>> time_of_day_profile(np.array([[2.0], [4.0], [0.0], [6.0]]), np.array([0, 1, 0, 1]), 3).tolist()
    [[2.0], [5.0], [4.0]]
    """
    speed = speed.astype(np.float64)
    sums, counts = np.zeros((2, steps_per_day, speed.shape[1]))
    np.add.at(sums, slots, speed)
    np.add.at(counts, slots, speed != 0)
    overall = speed.sum(0) / np.maximum((speed != 0).sum(0), 1)  # (N,)
    return np.where(counts > 0, sums / np.maximum(counts, 1), overall)


def profile_forecasts(profile: np.ndarray, inputs: np.ndarray, slots: np.ndarray) -> dict[str, np.ndarray]:
    """Historical average (the ``profile`` at the slots of the forecast steps) and last value (the last reading of
    the input window; the historical average where the window has none) of raw input windows, zero speeds being
    missing readings.

    Shapes: profile (steps per day, N), inputs (S, T_in, N) mph, slots (S, T_out) ->
    {"historical_average": (S, T_out, N), "last_value": (S, T_out, N)}.
    """
    historical = profile[slots]  # (S, T_out, N)
    seen = inputs != 0
    last_seen = inputs.shape[1] - 1 - seen[:, ::-1].argmax(1)  # (S, N)
    last = np.where(seen.any(1), np.take_along_axis(inputs, last_seen[:, None], 1)[:, 0], historical[:, 0])
    return {"historical_average": historical,
            "last_value": np.repeat(last[:, None].astype(np.float64), slots.shape[1], axis=1)}


def training_profile(data: TrafficSeriesData) -> np.ndarray:
    """:func:`time_of_day_profile` of the speeds seen as inputs of the training samples of a set-up traffic data
    module: (steps per day, N)."""
    seen = data.train_steps
    return time_of_day_profile(data.speed[seen], data.time_slot[seen], data.steps_per_day)


def baseline_forecasts(data: TrafficSeriesData, split: str = "test",
                       profile: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """:func:`profile_forecasts` of a split's windows, from the :func:`training_profile` (or ``profile``).

    Shapes: -> {"historical_average": (S, T_out, N), "last_value": (S, T_out, N)}.
    """
    window, _ = data.splits[split]
    profile = training_profile(data) if profile is None else profile
    return profile_forecasts(profile, data.speed[window[:, :data.input_steps]],
                             data.time_slot[window[:, data.input_steps:]])


def forecast_metrics(forecast: np.ndarray, target: np.ndarray, stage: str = "test") -> dict[str, float]:
    """The traffic task's metrics of a forecast as ``stage/name``, in the order the task computes them (``mae`` over
    all steps first, then ``mae_15``, ``mae_30``, ...). Shapes: (S, T_out, N), (S, T_out, N)."""
    metrics = TrafficForecastTask().metrics()
    metrics.update(torch.as_tensor(forecast, dtype=torch.float64), torch.as_tensor(target, dtype=torch.float64))
    return {f"{stage}/{k}": float(v) for k, v in metrics.compute().items()}


def traffic_baseline(data: TrafficSeriesData, model=None) -> BaselineResult:
    """Last value or historical average, whichever has the lower validation MAE (see the module doc), on the test
    split of a set-up traffic data module; predictions per test sample and sensor: the data row of the first
    forecast step (1-based), the sensor, and the forecast of each output step. With ``model`` (the run's, loaded),
    also the predictor data of both (:func:`traffic_predictor_data`)."""
    profile = training_profile(data)
    forecasts = {split: baseline_forecasts(data, split, profile) for split in ("val", "test")}
    val_target = torch.as_tensor(data.splits["val"][1], dtype=torch.float64)
    val_mae = {k: float(masked_mae(torch.as_tensor(v), val_target)) for k, v in forecasts["val"].items()}
    chosen = min(val_mae, key=val_mae.get)
    window, target = data.splits["test"]
    metrics = forecast_metrics(forecasts["test"][chosen], target)
    for other in (k for k in forecasts["test"] if k != chosen):
        metrics.update({f"{other.replace('_', ' ')} {k}": v
                        for k, v in forecast_metrics(forecasts["test"][other], target).items()})
    samples, _, num_nodes = target.shape
    sensors = data.input_spec.get("sensors") or [str(i) for i in range(num_nodes)]
    rows = forecasts["test"][chosen].transpose(0, 2, 1).reshape(samples * num_nodes, -1)  # (S N, T_out)
    predictions = {"row": np.repeat(window[:, data.input_steps] + 1, num_nodes).tolist(),
                   "sensor": sensors * samples,
                   **{name: rows[:, i].round(4).tolist() for i, name in enumerate(data.output_names)}}
    result = BaselineResult(chosen.replace("_", " "), metrics, predictions)
    if model is None:
        return result
    theirs = {split: f[chosen] for split, f in forecasts.items()}
    return dataclasses.replace(result, predictor=traffic_predictor_data(data, model, profile, chosen, theirs))


def traffic_predictor_data(data: TrafficSeriesData, model, profile: np.ndarray, chosen: str,
                           forecasts: dict[str, np.ndarray]) -> PredictorData:
    """The validation and test targets in mph, NaN where a reading is missing (the task's ``missing_target``, which
    its masked metrics leave out; so does the choice), the run's ``model``'s forecast and the baseline's
    (``forecasts``, split -> (S, T_out, N)), every output step of every sensor; saving keeps the ``profile`` and
    which forecast ``chosen`` is (:data:`TRAFFIC_ARRAYS`) as :data:`TRAFFIC_FILE`."""
    splits = {"val": data.val_set, "test": data.test_set}
    labels = {k: _observed(data.splits[k][1].astype(np.float64)) for k in splits}  # (S, T_out, N)
    state = {"profile": profile, "method": np.array([TRAFFIC_METHODS.index(chosen)], dtype=np.int64)}
    ours = {k: model_outputs(model, d) for k, d in splits.items()}  # (S, T_out, N) mph
    return PredictorData(task="regression", labels=labels, model=ours, baseline=forecasts,
                         save=lambda run_dir: save_arrays(state, Path(run_dir) / TRAFFIC_FILE))


def traffic_cross_validation(run_dir) -> CrossValidation:
    """The choice by folds of a traffic run (:class:`hub.kinds.CrossValidation`): the samples before the test split
    in blocks of time (:func:`timeseries.data.time_blocks`; ``data.args.cv_fold``: whole blocks validate, the
    training samples that share a time step with them are purged), the last value and the historical average out
    of fold (each fold's profile from its own training steps), the refit on every sample (``data.args.refit``).
    Compared on every output step of every sensor in mph, missing readings left out."""
    from hub.models import load
    from hub.recipe import load_recipe

    recipe = load_recipe(Path(run_dir) / "recipe.yaml")
    data, _ = _run_data(run_dir)
    data.setup()
    pooled = np.concatenate([data.splits["train"][1], data.splits["val"][1]]).astype(np.float64)
    labels = _observed(pooled)

    def fold_outputs(fold_dir):
        fold, _ = _run_data(fold_dir)
        fold.setup()
        return model_outputs(load(str(fold_dir)), fold.val_set)

    def baselines(folds, fold_seed):
        out = {method: np.full(labels.shape, np.nan) for method in TRAFFIC_METHODS}
        for index, (_, held) in enumerate(folds):
            forecasts = baseline_forecasts(_folded(recipe, len(folds), index, fold_seed), "val")
            for method in TRAFFIC_METHODS:
                out[method][held] = forecasts[method]
        return {method.replace("_", " "): values for method, values in out.items()}

    def test(name):
        pool_steps = data.train_steps.copy()
        pool_steps[:data.splits["val"][0][-1, data.input_steps - 1] + 1] = True  # the validation inputs too
        profile = time_of_day_profile(data.speed[pool_steps], data.time_slot[pool_steps], data.steps_per_day)
        return (_observed(data.splits["test"][1].astype(np.float64)), model_outputs(load(str(run_dir)), data.test_set),
                baseline_forecasts(data, "test", profile)[name.replace(" ", "_")])

    def refit(name, out_dir):
        final, _ = _run_data(out_dir)
        final.setup()
        state = {"profile": training_profile(final),
                 "method": np.array([TRAFFIC_METHODS.index(name.replace(" ", "_"))], dtype=np.int64)}
        return save_arrays(state, Path(out_dir) / TRAFFIC_FILE)

    return CrossValidation(
        task="regression", labels=labels, label_names=None, groups=data.pool_blocks,
        fold_overrides=lambda k, index, fold_seed: [f"data.args.cv_fold=[{k},{index},{fold_seed}]"],
        refit_overrides=["data.args.refit=true"], fold_outputs=fold_outputs, baselines=baselines, test=test,
        refit=refit)


def _observed(speeds: np.ndarray) -> np.ndarray:
    """Targets in mph with the missing readings (the task's ``missing_target``) as NaN, which the choice leaves out."""
    return np.where(speeds == TrafficForecastTask.missing_target, np.nan, speeds)


def kept_traffic_forecast(card, speed: np.ndarray, time_of_day: float, output_steps: int) -> np.ndarray:
    """The forecast of the baseline kept with ``card`` (its predictor's baseline file; sha256 checked) from the
    raw speeds of one input window, whose last step is at ``time_of_day`` (in [0, 1)): the forecast steps follow it,
    one slot of the kept profile each.

    Shapes: speed (T_in, N) mph, 0 for a missing reading -> (output_steps, N) mph."""
    found = blend_of(card)
    if found is None:
        raise HubError(f"the card of {card.name} predicts with its model; it keeps no baseline")
    _, path, sha256 = found
    arrays = load_arrays(path, sha256, TRAFFIC_ARRAYS)
    profile, method = arrays["profile"], TRAFFIC_METHODS[int(arrays["method"][0])]
    last = round(time_of_day * len(profile)) % len(profile)
    slots = (last + 1 + np.arange(output_steps)) % len(profile)
    return profile_forecasts(profile, speed[None].astype(np.float64), slots[None])[method][0]


def traffic_baseline_on_run_split(run_dir) -> BaselineResult:
    """:func:`traffic_baseline` on the split of the run in ``run_dir``, with the predictor data of it and the run's
    model (the weights it tested)."""
    from hub.models import load

    return traffic_baseline(_run_data(run_dir)[0], model=load(str(run_dir)))


DEGRADATION_BASELINE = "linear extrapolation of the window"


def linear_extrapolation(windows: np.ndarray, horizon: int) -> np.ndarray:
    """Each window's least-squares line through its levels, continued ``horizon`` inspections: the reliability
    field's plainest degradation forecast (a per-unit linear path), fitted on what the model reads.

    Shapes: windows (N, window, 1) -> (N, horizon).

    >>> linear_extrapolation(np.array([[[0.0], [1.0], [2.0]]]), 2).tolist()
    [[3.0, 4.0]]
    """
    levels = np.asarray(windows, np.float64)[..., 0]  # (N, window)
    t = np.arange(levels.shape[1], dtype=np.float64)
    slope = ((t - t.mean()) * (levels - levels.mean(1, keepdims=True))).sum(1) / ((t - t.mean()) ** 2).sum()
    ahead = np.arange(levels.shape[1], levels.shape[1] + horizon, dtype=np.float64) - t.mean()
    return levels.mean(1, keepdims=True) + slope[:, None] * ahead  # (N, horizon)


def degradation_baseline_on_run_split(run_dir) -> BaselineResult | None:
    """:func:`linear_extrapolation` of the test split's windows of the run in ``run_dir``, scored as the
    degradation-forecast task scores the model (RMSE, MAE over every forecast inspection, in the measure's units);
    None for a run without test units. Nothing is fitted, so nothing is kept: it stands beside the model."""
    data, _ = _run_data(run_dir)
    data.setup()
    if data.test_set is None:
        return None
    x, y = (t.numpy() for t in data.test_set.tensors)  # (N, window, 1), (N, horizon)
    forecast = linear_extrapolation(x, y.shape[1])
    error = forecast - y
    metrics = {"test/rmse": float(np.sqrt(np.mean(error ** 2))), "test/mae": float(np.mean(np.abs(error)))}
    predictions = {"window": list(range(len(y))),
                   **{name: forecast[:, i].tolist() for i, name in enumerate(data.output_names)}}
    return BaselineResult(DEGRADATION_BASELINE, metrics, predictions)


def spectral_baseline_on_run_split(run_dir) -> BaselineResult:
    """The spectral heart rate (:func:`timeseries.signals.spectral_baseline`: the largest PPG peak in 40-200 BPM that
    is not an accelerometer peak) of each test window of the run's split; nothing is fitted. Predictions per window,
    named ``RECORDING:START_s``."""
    data, _ = _run_data(run_dir)
    data.setup()
    x, y = (t.numpy() for t in data.test_set.tensors)
    pred = spectral_baseline(x)
    names, seen = [], {}
    for group in data.groups["test"]:
        names.append(f"{group}:{seen.get(group, 0) * STEP_S:g}s")
        seen[group] = seen.get(group, 0) + 1
    error = pred - y
    return BaselineResult("spectral peak (PPG, accelerometer peaks excluded)",
                          {"test/mae": float(np.abs(error).mean()), "test/rmse": float(np.sqrt((error ** 2).mean()))},
                          {"window": names, "bpm": pred.tolist()})
