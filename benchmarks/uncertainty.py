"""How sure the shipped tags are, and how well they know when not to be. Writes
``benchmarks/results/uncertainty.md`` with two tables:

- out-of-distribution scores (:mod:`hub.ood`): per tag, the score its card names, the share of in-distribution test
  inputs flagged (the false-alarm rate, configured at 1%), and per shifted set the AUROC of ``ood_score`` for
  separating it from the test inputs and the share of it flagged;
- calibration (:mod:`hub.uncertainty`): a classifier's temperature with its expected calibration error and NLL
  before and after on the validation and test splits (from the card, else fitted here on the validation split),
  a regression's 90% (Mondrian) split conformal interval with its coverage and mean width on the test split.

    HUB_DATA_DIR=../shared/data python -m benchmarks.uncertainty [--tags vit_digits.sklearn mlp.adult ...]

A run rewrites the rows of the tags it measures (all of :data:`TAGS` by default) and keeps the report's other rows
(tags another run added), in the order of :data:`TAGS`, then the others.

Shifted sets: images of noise, the digits' negatives, BreastMNIST scans and its own test images in grey for a
CIFAR-10 model, CIFAR-10 images in grey and in colour for a BreastMNIST model; table rows whose age and hours per
week are scaled far past the training range, or with a work class never seen in training; sensor windows drifting by
half a sensor's training range in random directions; WAV files of noise and of pure tones; traffic windows whose
sensors are permuted (there is no other road network's speed table here: METR-LA, PEMS-BAY and SZ-taxi come as
graphs only) or whose speeds are in km/h; ICU stays whose vital signs are three times their values (clipped, as the
data pipeline clips every value, to the training split's 99th percentile); graph nodes (the test nodes of Cora or
CiteSeer) whose feature entries are shuffled within each node, or whose features are another node's (every node's,
at random); survival-table patients (METABRIC's test rows) aged three times their age, or with an empty gene cell
(MKI67); for a slot autoencoder, CIFAR-10 test images resized to the scenes' 64x64, and uniform noise.
"""
from __future__ import annotations

import argparse
import tempfile
import wave
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader

import hub
from benchmarks import RESULTS
from hub import ood, uncertainty
from hub.io import atomic_write_bytes
from hub.models import model_card
from hub.recipe import card_data

TAGS = ["vit_digits.sklearn", "vit_micro_patch4_32.cifar10", "coat_lite_micro_32.cifar10", "halonet_micro_32.cifar10",
        "resnet_cbam_micro_32.cifar10", "vit_micro_patch4_32.breastmnist", "coat_lite_micro_32.breastmnist",
        "resnet_cbam_micro_32.breastmnist", "mlp.adult", "tabm.adult", "tab_transformer.adult", "tabr.adult",
        "rul_attention.fd001", "testam.los_loop", "timbre_attention.fsdd", "ast_tiny.fsdd", "ssast_tiny.fsdd",
        "ssast_tiny.fsdd_full", "ssast_tiny.fsdd_ssl", "tfcam.physionet2012", "gat.cora", "cat.cora", "gat.citeseer",
        "cat.citeseer", "survival_fusion.metabric", "slot_autoencoder_micro_64.shapes"]
TEST_ITEMS = 2000  # in-distribution test inputs scored per tag (the card's test_false_alarm_rate uses all)
SHIFTED_ITEMS = 300
VITAL_SIGNS = ("HR", "SysABP", "DiasABP", "MAP", "NISysABP", "NIDiasABP", "NIMAP", "RespRate", "Temp")
OOD_HEADER = ["| tag | score | flagged in-distribution (n) | card's test false alarms | shifted set | AUROC | "
              "flagged shifted (n) |", "|---|---|---:|---:|---|---:|---:|"]
CALIBRATION_HEADER = ["| tag | fitted | validation ECE before / after | test ECE before / after | "
                      "test NLL before / after | 90% interval: test coverage | mean width | source |",
                      "|---|---|---:|---:|---:|---:|---:|---|"]


def _tensors(loader, limit: int):
    """The first ``limit`` items of ``loader``: inputs (N, ...) (a dict of them for ICU stays) and targets (N, ...)."""
    xs, ys = [], []
    for x, y in loader:
        xs.append(x)
        ys.append(y)
        if sum(len(b) for b in ys) >= limit:
            break
    if isinstance(xs[0], dict):
        return {k: torch.cat([x[k] for x in xs])[:limit] for k in xs[0]}, torch.cat(ys)[:limit]
    return torch.cat(xs)[:limit], torch.cat(ys)[:limit]


def _loader(x, y: torch.Tensor) -> DataLoader:
    """Batches of ``(x, y)``: ``x`` a tensor (N, ...) or a dict of them."""
    items = [{k: v[i] for k, v in x.items()} for i in range(len(y))] if isinstance(x, dict) else x
    return DataLoader(list(zip(items, y)), batch_size=256)


def drifting_sensors(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Sensor windows (N, T, S), min-max scaled by the training split, with each sensor drifting up or down (drawn
    per window and sensor) linearly to half its training range by the window's end."""
    direction = torch.randint(0, 2, (len(x), 1, x.shape[2]), generator=generator) * 2 - 1
    return x + 0.5 * direction * torch.linspace(0, 1, x.shape[1])[None, :, None]


def permuted_sensors(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Traffic windows ``x`` (S, T, N sensors, C) with the sensors in a random order (the same for every window):
    each sensor's values stay in the network's range, the network's joint pattern breaks."""
    return x[:, :, torch.randperm(x.shape[2], generator=generator)]


def _write_wav(path: Path, samples: np.ndarray, rate: int = 8000) -> None:
    with wave.open(str(path), "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(rate)
        f.writeframes((np.clip(samples, -1, 1) * 32767).astype(np.int16).tobytes())


def _file_scores(model, files: list[str]) -> np.ndarray:
    from hub.predict import file_predictions

    batches = file_predictions(model, files, batch_size=64)
    return np.array([float(row[-2]) for _, rows in batches for row in rows])


def _table_scores(model, frame, folder: Path) -> np.ndarray:
    from hub.predict import table_predictions

    path = folder / "rows.csv"
    frame.to_csv(path, index=False)
    return np.array([float(row[-2]) for _, rows in table_predictions(model, str(path), 256) for row in rows])


def grey_images(x: torch.Tensor, spec: dict) -> torch.Tensor:
    """Normalised RGB images (N, 3, H, W) as grey ones (luma, in all three channels), normalised again."""
    mean, std = torch.tensor(spec["mean"])[:, None, None], torch.tensor(spec["std"])[:, None, None]
    luma = ((x * std + mean) * torch.tensor([0.299, 0.587, 0.114])[:, None, None]).sum(1, keepdim=True)
    return (luma.expand_as(x) - mean) / std


def _scaled_vital_signs(x: dict, spec: dict, factor: float) -> dict:
    """ICU stays' model inputs with the vital signs times ``factor``, clipped to the training split's 1st-99th
    percentiles and standardised as the data pipeline does."""
    values = x["values"].clone()
    for name in VITAL_SIGNS:
        j = spec["variables"].index(name)
        raw = values[..., j] * spec["std"][j] + spec["mean"][j]
        values[..., j] = ((raw * factor).clamp(spec["low"][j], spec["high"][j]) - spec["mean"][j]) / spec["std"][j]
    return {**x, "values": values}


def shuffled_node_features(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """The node features ``x`` (N, F) (dense or sparse CSR) with the entries of each node's vector shuffled (a bag
    of words keeps its length, its words are drawn anew), dense."""
    dense = x.to_dense() if x.layout != torch.strided else x
    order = torch.rand(dense.shape, generator=generator).argsort(1)
    return dense.gather(1, order)


def node_scores(model, detector, graph, x: torch.Tensor | None = None) -> np.ndarray:
    """``ood_score`` of the test nodes of ``graph``, its node features replaced by ``x`` (N, F) when given."""
    if x is not None:
        graph = graph.clone()
        graph.x = x
    return detector.score(ood.node_split_outputs(model, graph)["test"].components(detector))


def survival_rows(data):
    """The test split of a survival data module as the table a user gives ``attnhub predict``: its gene and
    clinical columns in their units (the standardisation undone), an empty cell for an unmeasured gene."""
    import pandas as pd

    rows, spec = data.test_set, data.input_spec
    genes = rows.genes.masked_fill(~rows.gene_mask, float("nan"))
    z = torch.cat([genes, rows.clinical], 1).double().numpy()
    return pd.DataFrame(z * np.asarray(spec["std"]) + np.asarray(spec["mean"]),
                        columns=spec["genes"] + spec["clinical"])


def cifar10_scenes(count: int, size: int) -> torch.Tensor:
    """The first ``count`` CIFAR-10 test images (count, 3, size, size), resized and normalised as the scenes
    (``(v - 0.5) / 0.5`` of pixel values v in [0, 1])."""
    data = card_data(model_card("vit_micro_patch4_32.cifar10"))
    spec = data.input_spec
    x = _tensors(data.test_dataloader(), count)[0]
    pixels = x * torch.tensor(spec["std"])[:, None, None] + torch.tensor(spec["mean"])[:, None, None]
    pixels = torch.nn.functional.interpolate(pixels, size=(size, size), mode="bilinear", align_corners=False)
    return (pixels.clamp(0, 1) - 0.5) / 0.5


def shifted_scores(tag: str, model, detector, data, folder: Path) -> dict[str, np.ndarray]:
    """``ood_score`` of each shifted set of ``tag``'s inputs (see the module docstring)."""
    card = model.pretrained_cfg
    kind, dataset = card.input_spec["kind"], tag.split(".")[1]
    generator = torch.Generator().manual_seed(0)

    def scores(x, y) -> np.ndarray:
        return ood.score_inputs(model, card, detector, _loader(x, y))

    if kind == "image":
        x, y = _tensors(data.test_dataloader(), SHIFTED_ITEMS)
        sets = {"uniform noise": torch.rand(x.shape, generator=generator) * 2 * x.abs().amax() - x.abs().amax()}
        if dataset == "cifar10":
            sets["BreastMNIST"] = _tensors(card_data(model_card("vit_micro_patch4_32.breastmnist")).test_dataloader(),
                                           SHIFTED_ITEMS)[0]
            sets["CIFAR-10 in grey"] = grey_images(x, card.input_spec)  # the classes it knows, photographed in grey
        elif dataset == "breastmnist":  # BreastMNIST models take 32x32x3 images with CIFAR-10's normalisation
            cifar = _tensors(card_data(model_card("vit_micro_patch4_32.cifar10")).test_dataloader(), SHIFTED_ITEMS)[0]
            sets["CIFAR-10 in grey"] = grey_images(cifar, card.input_spec)
            sets["CIFAR-10 in colour"] = cifar
        else:
            sets["inverted digits"] = -x
        return {name: scores(s, torch.zeros(len(s), dtype=torch.long)) for name, s in sets.items()}
    if kind == "table":
        rows = data.frames["test"].head(SHIFTED_ITEMS).drop(columns=[card.input_spec["preprocessor"]["target"]])
        return {"age x10, hours x20": _table_scores(model, rows.assign(age=rows["age"] * 10,
                                                                         hours_per_week=rows["hours_per_week"] * 20),
                                                    folder),
                "unseen work class": _table_scores(model, rows.assign(workclass="Astronaut"), folder)}
    if kind == "sensor_series":
        x, y = _tensors(data.test_dataloader(), SHIFTED_ITEMS)
        return {"drifting sensors": scores(drifting_sensors(x, generator), y)}
    if kind == "traffic_series":  # (S, T, N, [speed, time of day]), speeds standardised by the training mean, std
        x, y = _tensors(data.test_dataloader(), SHIFTED_ITEMS)
        permuted = permuted_sensors(x, generator)
        mean, std = card.input_spec["mean"], card.input_spec["std"]
        km_h = x.clone()
        km_h[..., 0] = ((x[..., 0] * std + mean) * 1.609344 - mean) / std
        return {"sensors permuted": scores(permuted, y), "speeds in km/h": scores(km_h, y)}
    if kind == "icu_stays":
        x, y = _tensors(data.test_dataloader(), SHIFTED_ITEMS)
        return {"vital signs x3": scores(_scaled_vital_signs(x, card.input_spec, 3.0), y)}
    if kind == "graph":
        graph = data.graph
        swapped = graph.x.to_dense()[torch.randperm(graph.num_nodes, generator=generator)]
        return {"shuffled feature entries": node_scores(model, detector, graph,
                                                        shuffled_node_features(graph.x, generator)),
                "another node's features": node_scores(model, detector, graph, swapped)}
    if kind == "survival_table":
        rows = survival_rows(data).head(SHIFTED_ITEMS)
        path = folder / "patients.csv"
        sets = {"age x3": rows.assign(age=rows["age"] * 3), "empty gene (MKI67)": rows.assign(MKI67=np.nan)}
        scores = {}
        for name, frame in sets.items():
            frame.to_csv(path, index=False)
            scores[name] = _file_scores(model, [str(path)])
        return scores
    if kind == "scene":
        x, y = _tensors(data.test_dataloader(), SHIFTED_ITEMS)
        sets = {"CIFAR-10 at 64x64": cifar10_scenes(len(x), x.shape[-1]),
                "uniform noise": torch.rand(x.shape, generator=generator) * 2 - 1}
        return {name: ood.score_inputs(model, card, detector, _loader(s, y)) for name, s in sets.items()}
    if kind == "audio":
        rng, t = np.random.default_rng(0), np.arange(4000) / 8000
        noise, tones = [], []
        for i in range(50):
            _write_wav(folder / f"noise{i}.wav", rng.normal(0, 0.3, len(t)))
            _write_wav(folder / f"tone{i}.wav", 0.5 * np.sin(2 * np.pi * (200 + 60 * i) * t))
            noise.append(str(folder / f"noise{i}.wav"))
            tones.append(str(folder / f"tone{i}.wav"))
        return {"white noise": _file_scores(model, noise), "pure tones": _file_scores(model, tones)}
    raise ValueError(f"no shifted sets for inputs of kind {kind!r}")


def _auroc(inside: np.ndarray, outside: np.ndarray) -> float:
    from sklearn.metrics import roc_auc_score

    scores = np.nan_to_num(np.concatenate([inside, outside]), posinf=1e12)
    return float(roc_auc_score(np.r_[np.zeros(len(inside)), np.ones(len(outside))], scores))


def ood_rows(tag: str, model, data) -> list[str]:
    """The OOD table's rows of ``tag``."""
    card = model.pretrained_cfg
    detector = ood.load_detector(card)
    if detector is None:
        return [f"| {tag} | {card.ood.get('score', 'not fitted')} | - | - | - | - | - |"]
    if card.input_spec["kind"] == "table":
        inside = ood.score_inputs(model, card, detector, data.test_dataloader(), data.frames["test"])
    elif card.input_spec["kind"] == "survival_table":  # batches of named inputs, all test rows
        inside = ood.score_inputs(model, card, detector, data.test_dataloader())
    elif card.input_spec["kind"] == "graph":
        inside = node_scores(model, detector, data.graph)
    else:
        inside = ood.score_inputs(model, card, detector, _loader(*_tensors(data.test_dataloader(), TEST_ITEMS)))
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for name, scores in shifted_scores(tag, model, detector, data, Path(folder)).items():
            rows.append(f"| {tag} | {card.ood['score']} | {detector.flag(inside).mean():.1%} ({len(inside)}) | "
                        f"{card.ood['test_false_alarm_rate']:.1%} | {name} | {_auroc(inside, scores):.3f} | "
                        f"{detector.flag(scores).mean():.1%} ({len(scores)}) |")
    return rows


def calibration_row(tag: str, model, data) -> str:
    """The calibration table's row of ``tag``: the card's ``calibration`` when it holds the figures, else
    :func:`hub.uncertainty.fit` on the validation split here (the card is not changed)."""
    from hub.tasks import create_task

    calibration, source = model.pretrained_cfg.calibration, "card"
    if "test" not in calibration and "half_width" not in calibration.get("conformal", {}):
        task = create_task(data.task, **data.task_args())
        calibration, source = uncertainty.fit(model, data, task, progress=False), "fitted by this script"
    if "temperature" in calibration:
        val, test = calibration["val"], calibration["test"]
        return (f"| {tag} | temperature {calibration['temperature']:.3f} | {val['ece']:.3f} / "
                f"{val['ece_calibrated']:.3f} | {test['ece']:.3f} / {test['ece_calibrated']:.3f} | "
                f"{test['nll']:.3f} / {test['nll_calibrated']:.3f} | - | - | {source} |")
    conformal = calibration.get("conformal", {})
    if "half_width" not in conformal:
        return f"| {tag} | none: {conformal.get('skipped', 'no outputs to calibrate')} | - | - | - | - | - | - |"
    if conformal.get("fitted_on", "validation split") != "validation split":
        source += " (cross-fitted residuals, `hub/cross_conformal.py`)"
    return (f"| {tag} | {conformal['method'].split(',')[0]}, {len(conformal['outputs'])} outputs | - | - | - | "
            f"{conformal['test_coverage']['0.9']:.1%} | {conformal['test_mean_width']['0.9']:.2f} | {source} |")


def table_rows(lines: list[str], header: list[str]) -> list[str]:
    """The rows under ``header`` in a report's ``lines`` (none when it is not there)."""
    for i in range(len(lines) - 1):
        if lines[i:i + 2] == header:
            rows = []
            for line in lines[i + 2:]:
                if not line.startswith("| "):
                    break
                rows.append(line)
            return rows
    return []


def merged(old: list[str], new: list[str], measured: list[str]) -> list[str]:
    """``old`` rows less those of the ``measured`` tags, plus the ``new`` rows, in the order of :data:`TAGS` (then
    the other tags in their order of appearance); a tag's rows keep their order."""
    rows = [r for r in old if r.split(" | ")[0][2:] not in measured] + new
    tags = list(dict.fromkeys([*TAGS, *(r.split(" | ")[0][2:] for r in rows)]))
    return sorted(rows, key=lambda r: tags.index(r.split(" | ")[0][2:]))


def write_report(path: Path, ood_table: list[str], calibration_table: list[str], measured: list[str]) -> None:
    """Write the report at ``path``: its rows of the ``measured`` tags replaced by these tables' (:func:`merged`)."""
    old = path.read_text().splitlines() if path.is_file() else []
    lines = ["# Uncertainty of the shipped tags", "",
             "Written by `python -m benchmarks.uncertainty` (a run rewrites the rows of the tags it measures and keeps "
             "the others).", "",
             "## Out-of-distribution scores", "",
             "Scores and thresholds: `hub/ood.py`; threshold at the 99th percentile of the validation split's scores "
             f"(a 1% false-alarm rate). Flagged in-distribution: the first {TEST_ITEMS} test inputs (all rows for "
             "tables and survival tables, all test nodes of a graph); card: the whole test split, as the card "
             "records it. AUROC: of `ood_score`, the shifted set "
             f"(at most {SHIFTED_ITEMS} inputs) against those test inputs. FSDD's test split is a speaker not heard in "
             "training (the validation split holds the training speakers' clips), so its flagged share is a "
             "speaker shift, not a false-alarm rate. Los-loop's shifted windows come from Los-loop itself: no other "
             "road network's speeds are here; its split is in time order, and its test windows (the last 20% of "
             "the week) hold congestion unlike the training days' (7.5% flagged: the range check 4.5%, the "
             "sensors' order 3.0%).", "",
             *OOD_HEADER, *merged(table_rows(old, OOD_HEADER), ood_table, measured), "",
             "## Calibration and intervals", "",
             "Classifiers: temperature scaling fitted on the validation split; expected calibration error (15 "
             "equal-width bins) and NLL before / after dividing the logits by the temperature. Regressions: 90% "
             "Mondrian split conformal intervals (per output, half widths from the validation residuals in up to "
             f"{uncertainty.MAX_BINS} bins of the predicted value, `hub/uncertainty.py`; rul_attention.fd001's from "
             "the residuals of four more runs of its recipe on 25% of the engines each, as its validation split "
             "holds 5 engines, `hub/cross_conformal.py`); coverage and mean width "
             "(in the target's units: cycles of RUL, mph) on the test split, over every output and sensor. "
             "Source: the card's `calibration`, or fitted by this script when the card holds no figures (the card "
             "is not changed).", "",
             *CALIBRATION_HEADER, *merged(table_rows(old, CALIBRATION_HEADER), calibration_table, measured)]
    atomic_write_bytes(path, ("\n".join(lines) + "\n").encode())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tags", nargs="+", default=TAGS)
    args = parser.parse_args()
    path = RESULTS / "uncertainty.md"
    for tag in args.tags:  # the report is written after each tag: a long run keeps what it measured
        model = hub.load(tag).eval()
        data = card_data(model.pretrained_cfg)
        data.setup("fit")
        ood_table, calibration = ood_rows(tag, model, data), calibration_row(tag, model, data)
        write_report(path, ood_table, [calibration], [tag])
        print(*ood_table, calibration, sep="\n", flush=True)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
