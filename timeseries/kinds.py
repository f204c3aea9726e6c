"""The time-series input kinds: ``sensor_series`` (one CSV per unit for the RUL models), ``degradation_series`` (one
CSV per unit, a degradation measure per inspection, for the degradation-path models), ``ppg_series`` (one CSV per
recording of wrist PPG and accelerometer samples, for the heart-rate models) and ``traffic_series`` (a
folder with ``speeds.csv`` and ``adjacency.csv`` for TESTAM and the traffic GRU). Each gives the default recipe of
its families (``attnhub finetune rul_attention --data FOLDER``, from scratch) and the classic baseline of
:mod:`timeseries.baselines` beside every fine-tuned run, kept as the run's predictor (or blended with the model)
where it is better on the validation split.

>>> SensorSeriesKind().default_recipe("rul_attention", "units").data.args
{'root': 'units', 'window': 30, 'horizon': 10, 'rul_cap': 125.0, 'batch_size': 128}
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import torch

from hub.errors import DataError
from hub.explain import Explanation
from hub.kinds import (
    BaselineResult,
    CrossValidation,
    InputForm,
    InputKind,
    KindSpec,
    OODProfile,
    batch_axes,
    predict_per_file,
    register_kind,
)
from hub.recipe import DataSection, EarlyStoppingSection, Recipe, recipe_file, scratch_recipe
from timeseries.baselines import (
    degradation_baseline_on_run_split,
    kept_rul_estimator,
    kept_traffic_forecast,
    rul_baseline_on_run_split,
    rul_cross_validation,
    rul_forecast,
    spectral_baseline_on_run_split,
    traffic_baseline_on_run_split,
    traffic_cross_validation,
)
from timeseries.data import minmax_apply, traffic_features
from timeseries.explain import (
    path_explanation,
    pulse_explanation,
    traffic_explanation,
    traffic_samples,
    unit_samples,
    window_explanation,
)
from timeseries.io import (
    _unit_files,
    read_degradation_csv,
    read_ppg_csv,
    read_speed_csv,
    read_unit_columns,
    speed_series,
    unit_series,
)
from timeseries.signals import normalised, prepare_windows, track


@dataclass(frozen=True)
class SensorSeriesSpec(KindSpec):
    """A RUL model's input: the last ``window`` cycles of the ``sensors``, min-max scaled with the training ``min``
    and ``max``; it forecasts ``horizon`` RULs capped at ``rul_cap``."""

    sensors: list[str]
    window: int
    horizon: int
    min: list[float]
    max: list[float]
    rul_cap: float


@register_kind
class SensorSeriesKind(InputKind):
    """One CSV per unit (engine, machine), one row per cycle, for the RUL models."""

    name, domain, Spec = "sensor_series", "timeseries", SensorSeriesSpec
    tasks = ("rul-regression",)
    ood = OODProfile(input_scores=("range",))  # per sensor: the last dimension of a window
    input_form = InputForm.FILE_EACH

    def finetune_data(self, card, path: str) -> DataSection:
        """The card's sensors, read from the units at ``path``; units without them are refused, naming the family
        to train from scratch on their own sensors (a model's weights are tied to the sensors it was trained on)."""
        spec = self.spec(card)
        first = _unit_files(Path(path))[0]
        missing = [s for s in spec.sensors if s not in read_unit_columns(first)]
        if missing:
            raise DataError(f"{first} lacks the sensor column(s) {missing} that {card.name} was trained on; its "
                            "weights do not transfer to other sensors. To train on your own sensors from scratch: "
                            f"attnhub finetune {card.family} --data {path}")
        return DataSection(name="sensor_units", args={"root": str(path), "sensors": spec.sensors,
                                                      "window": spec.window, "horizon": spec.horizon,
                                                      "rul_cap": spec.rul_cap})

    def predict(self, card, model, paths: Iterable[str],
                batch_size: int) -> Iterator[tuple[list[str], torch.Tensor]]:
        """Yield ``(names, forecasts (B, horizon))`` from the last ``window`` cycles of each unit CSV."""
        return predict_per_file(model, paths, self.transform(card), batch_size)

    def transform(self, card) -> Callable[[Any], torch.Tensor]:
        """One unit's raw sensor rows (a pandas DataFrame with a ``cycle`` column and the card's sensor columns, e.g.
        one engine of a C-MAPSS file with the columns its readme names, or a unit CSV's path) -> its last ``window``
        cycles of the card's sensors, min-max scaled with the training min and max: ``(window, S)``; stack units
        for the model's ``(B, window, S)``."""
        spec = self.spec(card)

        def prepare(unit) -> torch.Tensor:
            series = unit_series(unit, spec.sensors, spec.window)[-spec.window:]
            return torch.from_numpy(minmax_apply(series, spec.min, spec.max))

        return prepare

    def explanation(self, card, model, inputs: dict[str, Any], target: int | None = None) -> Explanation:
        """Attention over the window's cycles (:func:`timeseries.explain.window_explanation`)."""
        return window_explanation(card, model, inputs["x"])

    def explain_samples(self, card, inputs: list[str]) -> Iterator[tuple[str, dict[str, Any]]]:
        return unit_samples(card, inputs)

    def example_input(self, card, size: int, generator: torch.Generator):
        """``x`` (B, window cycles, sensors): min-max scaled sensor readings."""
        spec = card.input_spec
        return batch_axes({"x": torch.rand(size, spec["window"], len(spec["sensors"]), generator=generator)})

    def baseline(self, run_dir) -> BaselineResult:
        return rul_baseline_on_run_split(run_dir)

    def cross_validation(self, run_dir) -> CrossValidation:
        """Folds of the training and validation units' windows, by unit; HistGradientBoosting and the guard's near
        shift out of fold; the refit on every unit (:func:`timeseries.baselines.rul_cross_validation`)."""
        return rul_cross_validation(run_dir)

    def baseline_outputs(self, card, path: str) -> np.ndarray:
        """The kept HistGradientBoosting's forecast (:func:`timeseries.baselines.rul_forecast`) from the unit CSV at
        ``path``'s last window, read as :meth:`predict` reads it: (1, horizon)."""
        spec = self.spec(card)
        window = self.transform(card)(path).numpy()[None]  # (1, window, S)
        return rul_forecast(kept_rul_estimator(card), window, spec.horizon, spec.rul_cap)

    def default_recipe(self, family: str, path: str) -> Recipe:
        """Every column of the unit CSVs at ``path`` but ``cycle`` is a sensor (the constant ones dropped); the FD001
        recipe (recipes/timeseries/rul_attention_fd001.yaml) whatever the family: 30-cycle windows, RUL cap 125,
        min-max scaling fitted on the training units, no dropout (the family's other dimensions its defaults),
        batches of 128, AdamW (lr 1e-3) with a cosine schedule run to its end, gradients clipped at norm 1 and the
        last epoch tested (no early stopping: the validation units, 15%, are watched). 40 epochs, not its 18: a
        user's folder trains on 70% of its units (FD001 as unit CSVs: 72 engines, not 95).

        Chosen on the validation units (13 engines of FD001 as user CSVs, seed 0, last-epoch val/rmse;
        HistGradientBoosting on window statistics 12.96): the former default (dropout 0.1, batches of 256, 20
        epochs, early stopping with patience 10 and the best epoch tested) stopped after 19 epochs, tested the 9th:
        its learning rate barely decayed (val 12.98 picked from a noisy curve; test 15.7); the FD001 recipe's 18
        epochs 12.67; 40 epochs 12.04; dim 64 or depth 2 at 18 epochs 12.01, 12.65; dim 64 at 40 epochs overfits
        (16.15); lr 2e-3 12.76. See benchmarks/results/user_data.md."""
        fd001 = recipe_file("timeseries/rul_attention_fd001.yaml")
        windows = {k: fd001.data.args[k] for k in ("window", "horizon", "rul_cap", "batch_size")}
        data = DataSection(name="sensor_units", args={"root": str(path), **windows})
        return scratch_recipe(family, data, {"dropout": fd001.model.args["dropout"]}, start=fd001,
                              trainer=fd001.trainer.replace(max_epochs=40))


@dataclass(frozen=True)
class TrafficSeriesSpec(KindSpec):
    """A traffic model's input: ``input_steps`` steps of ``num_nodes`` sensors' speeds, z-scored with the training
    ``mean`` and ``std``; it forecasts ``output_steps`` steps."""

    input_steps: int
    output_steps: int
    num_nodes: int
    mean: float
    std: float
    sensors: list[str] | None = None


def _recent_rows(card, spec: TrafficSeriesSpec, ids: list[str] | None, speed: np.ndarray, time_of_day: np.ndarray,
                 source) -> tuple[np.ndarray, np.ndarray]:
    """The last ``input_steps`` rows of raw speeds (T, N) and their time of day (T,), checked against the card:
    ``(input_steps, N)`` and ``(input_steps,)``; ``source`` names the speeds in errors."""
    if speed.shape[1] != spec.num_nodes:
        raise DataError(f"{source} has {speed.shape[1]} sensors but {card.name} takes {spec.num_nodes}")
    if spec.sensors is not None and ids is not None and ids != spec.sensors:
        raise DataError(f"{source}: sensor ids differ from the ones {card.name} was trained on")
    if len(speed) < spec.input_steps:
        raise DataError(f"{source} has {len(speed)} rows, fewer than the model's {spec.input_steps} input steps")
    recent = slice(len(speed) - spec.input_steps, None)
    return speed[recent], time_of_day[recent]


def _traffic_input(card, spec: TrafficSeriesSpec, ids: list[str] | None, speed: np.ndarray, time_of_day: np.ndarray,
                   source) -> torch.Tensor:
    """The model's input of :func:`_recent_rows`: ``(input_steps, N, 2)``."""
    recent = _recent_rows(card, spec, ids, speed, time_of_day, source)
    return torch.from_numpy(traffic_features(*recent, spec.mean, spec.std))


@register_kind
class TrafficSeriesKind(InputKind):
    """A folder with ``speeds.csv`` and ``adjacency.csv`` for TESTAM and the traffic GRU. Its baseline (last value
    or historical average, :mod:`timeseries.baselines`) predicts: a run keeps the better of model, baseline and
    blend on the validation split (:mod:`hub.predictor`), and ``predict`` forecasts with it (a blend: the weighted
    mean of both forecasts in mph); the baseline has no exported form (``export --model-only``)."""

    name, domain, Spec = "traffic_series", "timeseries", TrafficSeriesSpec
    tasks = ("traffic-forecast",)
    # ranges per sensor and channel (each road its own speeds), and the sensors' order by speed
    ood = OODProfile(input_scores=("range", "sensor_order"), range_dims=2)

    def finetune_data(self, card, path: str) -> DataSection:
        spec = self.spec(card)
        return DataSection(name="traffic_csv", args={"root": str(path), "input_steps": spec.input_steps,
                                                     "output_steps": spec.output_steps})

    def predict(self, card, model, paths: Iterable[str], batch_size: int) -> Iterator[tuple[list[str], torch.Tensor]]:
        """Yield ``(["file:sensor", ...], forecasts (N, output_steps))`` per speeds file: its last input window."""
        spec = self.spec(card)
        for path in paths:
            ids, speed, time_of_day = read_speed_csv(path)
            forecast = model(_traffic_input(card, spec, ids, speed, time_of_day, path)[None])[0]  # (T_out, N)
            yield [f"{path}:{sensor}" for sensor in ids], forecast.T

    def transform(self, card) -> Callable[..., torch.Tensor]:
        """Raw speeds (a speeds CSV's path, or a (T, N) array or DataFrame of mph, NaN for a missing reading, with
        its timestamps: ``prepare(speeds, times=...)``, a ``time`` column or a DatetimeIndex; see
        :func:`timeseries.io.speed_series`) -> the model's input of its last ``input_steps`` rows, [speed z-scored
        with the training mean and std, time of day]: ``(input_steps, N, 2)``; stack windows for ``(B, T, N, 2)``."""
        spec = self.spec(card)

        def prepare(speeds, times=None) -> torch.Tensor:
            source = speeds if isinstance(speeds, (str, Path)) else "the speeds"
            return _traffic_input(card, spec, *speed_series(speeds, times), source)

        return prepare

    def explanation(self, card, model, inputs: dict[str, Any], target: int | None = None) -> Explanation:
        """Integrated Gradients of the forecast (:func:`timeseries.explain.traffic_explanation`)."""
        return traffic_explanation(model, inputs["x"])

    def explain_samples(self, card, inputs: list[str]) -> Iterator[tuple[str, dict[str, Any]]]:
        return traffic_samples(card, inputs)

    def example_input(self, card, size: int, generator: torch.Generator):
        """``x`` (B, input steps, sensors, 2): standardised speed and time of day (fraction of the day)."""
        spec = card.input_spec
        speed = torch.randn(size, spec["input_steps"], spec["num_nodes"], 1, generator=generator)
        time_of_day = torch.rand(size, spec["input_steps"], 1, 1, generator=generator).expand_as(speed)
        return batch_axes({"x": torch.cat([speed, time_of_day], -1)})

    def baseline(self, run_dir) -> BaselineResult:
        return traffic_baseline_on_run_split(run_dir)

    def cross_validation(self, run_dir) -> CrossValidation:
        """Folds of blocks of time before the test split, purged; the last value and the historical average out of
        fold; the refit on every sample (:func:`timeseries.baselines.traffic_cross_validation`)."""
        return traffic_cross_validation(run_dir)

    def baseline_outputs(self, card, path: str) -> np.ndarray:
        """The kept last value or historical average's forecast (:func:`timeseries.baselines.kept_traffic_forecast`)
        from the speeds file at ``path``'s last input window, read as :meth:`predict` reads it: (N, output_steps) mph,
        a row per sensor."""
        spec = self.spec(card)
        ids, speed, time_of_day = read_speed_csv(path)
        speed, time_of_day = _recent_rows(card, spec, ids, speed, time_of_day, path)
        return kept_traffic_forecast(card, speed, float(time_of_day[-1]), spec.output_steps).T

    def default_recipe(self, family: str, path: str) -> Recipe:
        """The family's Los-loop recipe (``recipes/timeseries/FAMILY_los_loop.yaml``: 12 steps in and out, batches of
        64, AdamW with a cosine schedule, gradients clipped at norm 5) on the folder at ``path``, with the family's
        default dimensions; at most 30 epochs, stopped after 5 without a better validation metric, the best epoch
        tested."""
        los_loop = recipe_file(f"timeseries/{family}_los_loop.yaml")
        steps = {k: los_loop.data.args[k] for k in ("input_steps", "output_steps", "batch_size")}
        data = DataSection(name="traffic_csv", args={"root": str(path), **steps})
        return scratch_recipe(family, data, {}, start=los_loop, trainer=los_loop.trainer.replace(
            max_epochs=30, early_stopping=EarlyStoppingSection(patience=5)))


@dataclass(frozen=True)
class DegradationSeriesSpec(KindSpec):
    """A degradation model's input: the last ``window`` levels of ``measure``, inspected every ``step`` (in
    ``time_column``'s units); it forecasts ``horizon`` inspections; ``threshold`` is the failure level (or None)."""

    window: int
    horizon: int
    measure: str
    time_column: str
    step: float
    threshold: float | None = None


@register_kind
class DegradationSeriesKind(InputKind):
    """One CSV per unit (a laser, a component), one row per inspection, for the degradation-path models."""

    name, domain, Spec = "degradation_series", "timeseries", DegradationSeriesSpec
    tasks = ("degradation-forecast",)
    ood = OODProfile(input_scores=("range",))
    input_form = InputForm.FILE_EACH

    def finetune_data(self, card, path: str) -> DataSection:
        """The unit CSVs at ``path`` with the card's measure, time column, window and horizon."""
        spec = self.spec(card)
        return DataSection(name="degradation_units", args={
            "root": str(path), "measure": spec.measure, "time_column": spec.time_column, "threshold": spec.threshold,
            "window": spec.window, "horizon": spec.horizon})

    def predict(self, card, model, paths: Iterable[str],
                batch_size: int) -> Iterator[tuple[list[str], torch.Tensor]]:
        """Yield ``(names, forecasts (B, horizon))`` from the last ``window`` inspections of each unit CSV."""
        return predict_per_file(model, paths, self.transform(card), batch_size)

    def transform(self, card) -> Callable[[Any], torch.Tensor]:
        """A unit CSV's path -> its last ``window`` levels, ``(window, 1)`` (inspections ``step`` apart, checked)."""
        spec = self.spec(card)

        def prepare(path) -> torch.Tensor:
            levels, _ = read_degradation_csv(path, spec.measure, spec.time_column, spec.window, spec.step)
            return torch.tensor(levels[-spec.window:], dtype=torch.float32)[:, None]

        return prepare

    def baseline(self, run_dir) -> BaselineResult | None:
        """Linear extrapolation of each test window (:func:`timeseries.baselines.degradation_baseline_on_run_split`),
        beside the model."""
        return degradation_baseline_on_run_split(run_dir)

    def explanation(self, card, model, inputs: dict[str, Any], target: int | None = None) -> Explanation:
        """Attribution of the forecast path over the window's inspections, the attention in the JSON
        (:func:`timeseries.explain.path_explanation`)."""
        return path_explanation(model, inputs["x"])

    def explain_samples(self, card, inputs: list[str]) -> Iterator[tuple[str, dict[str, Any]]]:
        """``(unit CSV's stem, {"x": (1, window, 1)})`` for each unit CSV named (as ``predict`` reads them)."""
        if not inputs:
            raise DataError("name the unit CSVs to explain (a time column and the measure, one row per inspection), "
                            "e.g. attnhub explain degradation_gru.laser laser_01.csv")
        prepare = self.transform(card)
        for path in inputs:
            yield Path(path).stem, {"x": prepare(path)[None]}

    def example_input(self, card, size: int, generator: torch.Generator):
        """``x`` (B, window, 1): increasing levels up to the failure threshold."""
        spec = card.input_spec
        steps = torch.rand(size, spec["window"], 1, generator=generator)
        return batch_axes({"x": steps.cumsum(1) * (spec.get("threshold") or 1.0) / spec["window"]})

    def default_recipe(self, family: str, path: str) -> Recipe:
        """The laser recipe (recipes/timeseries/degradation_gru_laser.yaml: 4 inspections in, 4 out, AdamW with a
        cosine schedule, 150 epochs) on the unit CSVs at ``path``, whose columns are ``time`` and ``level`` (other
        names: ``data.args.time_column=`` / ``data.args.measure=``)."""
        laser = recipe_file("timeseries/degradation_gru_laser.yaml")
        args = {k: laser.data.args[k] for k in ("window", "horizon", "batch_size")}
        return scratch_recipe(family, DataSection(name="degradation_units", args={"root": str(path), **args}), {},
                              start=laser)


@dataclass(frozen=True)
class PPGSeriesSpec(KindSpec):
    """A heart-rate model's input: a recording's ``channels`` (PPG 1-2, accelerometer x, y, z) at ``rate`` Hz, cut
    into ``window_s``-second windows every ``step_s`` seconds, band-passed to ``band_hz``, decimated to
    ``model_rate`` Hz and normalised per window and channel (:mod:`timeseries.signals`)."""

    channels: list[str]
    rate: float
    model_rate: float
    window_s: float
    step_s: float
    band_hz: list[float]


@register_kind
class PPGSeriesKind(InputKind):
    """One CSV per recording (a column per channel, one row per sample), for the heart-rate models. ``predict`` gives
    one row per 8-s window every 2 s (``FILE:START_s``): the heart rate tracked causally over the recording's windows
    (:func:`timeseries.signals.track`) for a family with heart-rate bins (``pulse``), else the window's own."""

    name, domain, Spec = "ppg_series", "timeseries", PPGSeriesSpec
    tasks = ("heart-rate",)
    ood = OODProfile(input_scores=("range",))

    def finetune_data(self, card, path: str) -> DataSection:
        """The recordings (``NAME.csv``) and reference heart rates (``NAME.bpm.csv``) at ``path``, at the card's
        rate."""
        return DataSection(name="ppg_recordings", args={"root": str(path), "rate": self.spec(card).rate})

    def predict(self, card, model, paths: Iterable[str],
                batch_size: int) -> Iterator[tuple[list[str], torch.Tensor]]:
        """Yield ``(["FILE:0s", "FILE:2s", ...], BPM (W, 1))`` per recording CSV, tracked where the model has bins.
        A recording's windows go through the model in one call (the OOD scores read that call's inputs)."""
        prepare, spec = self.transform(card), self.spec(card)
        for path in paths:
            windows = prepare(path)  # (W, 5, T)
            bpm = model(windows)  # (W, 1)
            if hasattr(model, "bin_logits"):
                tracked = track(model.bin_logits(windows).log_softmax(-1).numpy(), model.bpm.numpy())
                bpm = torch.from_numpy(tracked).float()[:, None]
            yield [f"{path}:{i * spec.step_s:g}s" for i in range(len(windows))], bpm

    def transform(self, card) -> Callable[[Any], torch.Tensor]:
        """A recording (a CSV's path with the card's channel columns, or a ``(5, N)`` array of them at the card's
        rate) -> its prepared windows ``(W, 5, T)`` (:func:`timeseries.signals.prepare_windows`)."""
        spec = self.spec(card)

        def prepare(recording) -> torch.Tensor:
            signals = read_ppg_csv(recording, spec.channels) if isinstance(recording, (str, Path)) else recording
            return torch.from_numpy(prepare_windows(np.asarray(signals), spec.rate))

        return prepare

    def explanation(self, card, model, inputs: dict[str, Any], target: int | None = None) -> Explanation:
        """The PPG bins' cross-attention over the accelerometer's (:func:`timeseries.explain.pulse_explanation`)."""
        return pulse_explanation(model, inputs["x"])

    def explain_samples(self, card, inputs: list[str]) -> Iterator[tuple[str, dict[str, Any]]]:
        """``(FILE_STARTs, {"x": (1, 5, T)})`` for every window of each recording CSV named; ``FILE:SECONDS`` names one
        window (its start, a multiple of 2 s)."""
        if not inputs:
            raise DataError("name the recording CSVs to explain (columns ppg1, ppg2, acc_x, acc_y, acc_z), e.g. "
                            "attnhub explain pulse.troika run.csv or run.csv:40 for the window starting at 40 s")
        prepare, spec = self.transform(card), self.spec(card)
        for item in inputs:
            path, _, start = str(item).rpartition(":") if str(item).rpartition(":")[2].isdigit() else (item, "", "")
            windows = prepare(path)
            chosen = range(len(windows)) if not start else [int(float(start) / spec.step_s)]
            for i in chosen:
                if not 0 <= i < len(windows):
                    raise DataError(f"{path} has windows starting at 0-{(len(windows) - 1) * spec.step_s:g} s, not "
                                    f"{start}")
                yield f"{Path(path).stem}_{i * spec.step_s:g}s", {"x": windows[i:i + 1]}

    def example_input(self, card, size: int, generator: torch.Generator):
        """``x`` (B, 5, T): PPG channels with a pulse of 60-180 BPM and its harmonic, accelerometer axes with a step
        rhythm, in noise, normalised as prepared windows are."""
        spec = card.input_spec
        samples = int(spec["window_s"] * spec["model_rate"])
        t = torch.arange(samples) / spec["model_rate"]
        heart = (1.0 + 2.0 * torch.rand(size, 1, 1, generator=generator)) * t  # cycles: 60-180 BPM
        step = (1.5 + 1.5 * torch.rand(size, 1, 1, generator=generator)) * t  # 90-180 steps a minute
        ppg = torch.sin(2 * torch.pi * heart) + 0.4 * torch.sin(4 * torch.pi * heart) + 0.5 * torch.sin(
            2 * torch.pi * step)
        acc = torch.sin(2 * torch.pi * step + torch.rand(size, 3, 1, generator=generator) * 6.28)
        x = torch.cat([ppg.expand(-1, 2, -1), acc], 1) + 0.3 * torch.randn(size, 5, samples, generator=generator)
        return batch_axes({"x": normalised(x)})

    def baseline(self, run_dir) -> BaselineResult:
        return spectral_baseline_on_run_split(run_dir)

    def default_recipe(self, family: str, path: str) -> Recipe:
        """The TROIKA recipe (recipes/timeseries/pulse_troika.yaml) on the recordings at ``path`` (125 Hz; other
        rates: ``data.args.rate=``), split 70/15/15 by recording, the best validation epoch tested."""
        troika_recipe = recipe_file("timeseries/pulse_troika.yaml")
        data = DataSection(name="ppg_recordings", args={"root": str(path), **{
            k: troika_recipe.data.args[k] for k in ("stretch", "batch_size")}})
        return scratch_recipe(family, data, None, start=troika_recipe)
