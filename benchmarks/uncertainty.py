"""How sure the shipped tags are, and how well they know when not to be. Writes
``benchmarks/results/uncertainty.md`` with two tables:

- out-of-distribution scores (:mod:`hub.uncertainty.ood`): per tag, the score its card names, the share of
  in-distribution test inputs flagged (the false-alarm rate, configured at 1%), and per shifted set the AUROC of
  ``ood_score`` for separating it from the test inputs, beside the AUROC of the plain baselines computed from the same
  forward pass (:func:`baseline_scores`: the maximum softmax probability, the max logit and the energy of a classifier's
  logits; KNN, the distance to the 50th nearest training feature, normalised, of a model with penultimate features (the
  k-th, k at most 5% of a bank of fewer than 1,000); the width of a regression's 90% conformal interval), the best
  of them, and the share of the set flagged;
- calibration (:mod:`hub.uncertainty.conformal`): a classifier's temperature with its expected calibration error and NLL
  before and after on the validation and test splits (from the card, else fitted here on the validation split),
  a regression's 90% (Mondrian) split conformal interval with its coverage and mean width on the test split.

    HUB_DATA_DIR=../shared/data python -m benchmarks.uncertainty [--tags vit_digits.sklearn ...] [--near cora ...]

A run rewrites the rows of the tags and near shifts it measures (all of :data:`TAGS` and :data:`NEAR` by default)
and keeps the report's other rows (tags another run added), in the order of :data:`TAGS`, then the others.

Shifted sets: images of noise, the digits' negatives, BreastMNIST scans and its own test images in grey for a
CIFAR-10 model, CIFAR-10 images in grey and in colour for a BreastMNIST model; table rows whose age and hours per
week are scaled far past the training range, or with a work class never seen in training; sensor windows drifting by
half a sensor's training range in random directions; WAV files of noise and of pure tones; traffic windows whose
sensors are permuted (there is no other road network's speed table here: METR-LA, PEMS-BAY and SZ-taxi come as
graphs only) or whose speeds are in km/h; ICU stays whose vital signs are three times their values (clipped, as the
data pipeline clips every value, to the training split's 99th percentile); graph nodes (the test nodes of Cora or
CiteSeer) whose feature entries are shuffled within each node, or whose features are another node's (every node's,
at random); survival-table patients (METABRIC's test rows) aged three times their age, or with an empty gene cell
(MKI67); for a slot autoencoder, CIFAR-10 test images resized to the scenes' 64x64, and uniform noise. These are far
shifts.

Near shifts (:data:`NEAR`, ``--near``): inputs of the same kind and source that the model was not trained on, given
to a model trained here for the purpose (seeded, its family's recipe with overrides; kept in ``runs/near_shift/``
and reused, never published; delete a run folder to train it again), its detector fitted at the end of training as
every run's is:

- graphs: gat trained on Cora (CiteSeer) with the labels of its two last classes dropped (their nodes and edges stay
  in the graph, as a transductive graph holds its unknown nodes, but in no split: the public split's nodes of the
  other classes are the training, validation and test nodes); the held-out classes' test nodes (public test split)
  against the known classes' test nodes;
- images: airbench_cbam_32.cifar10 fine-tuned by linear probe on 6 of CIFAR-10's classes (images its backbone was
  not trained on), the other 4 classes' test images against the 6 classes' (:func:`near_images`; CIFAR-10's open set
  with models trained without the unknowns is ``benchmarks/open_set.py``);
- audio: ast_tiny trained on FSDD's digits 0-4 (``recipes/audio/ast_tiny_fsdd_digits_0_4.yaml``, unchanged), the
  test speaker's digits 5-9 against their digits 0-4;
- tables: mlp trained on Adult's rows of people born in the United States (``native_country`` dropped from the
  features, so that no unseen category gives the others away; both of Adult's files, split 70/15/15 as a user's
  table), the rows of people born elsewhere against the test split;
- RUL: rul_attention trained on the 50 FD001 training engines that lived longer than the median (as unit CSVs, split
  by engine), given the other 50 engines cut at random cycles (their last window before the cut), against its own
  held-out engines' windows;
- traffic: the shipped testam.los_loop (no model trained: the shift needs none), its test windows with 10% of the
  sensors swapped in pairs (each series a real one, read at another road), against the same test windows.
"""
from __future__ import annotations

import argparse
import tempfile
import wave
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from torch.utils.data import DataLoader

import hub
from benchmarks import RESULTS, ROOT
from hub.data import local_copy
from hub.io import atomic_folder, atomic_write_bytes
from hub.kinds import transform
from hub.models import load_run, model_card
from hub.recipe import card_data
from hub.uncertainty import conformal, ood

TAGS = ["vit_digits.sklearn", "vit_micro_patch4_32.cifar10", "coat_lite_micro_32.cifar10_20k",
        "halonet_micro_32.cifar10", "resnet_cbam_micro_32.cifar10", "airbench_cbam_32.cifar10",
        "airbench_halo_32.cifar10", "cct_4_3x2_32.cifar10", "coat_lite_micro_32.cifar10",
        "vit_micro_patch4_32.breastmnist", "coat_lite_micro_32.breastmnist", "resnet_cbam_micro_32.breastmnist",
        "mlp.adult", "tabm.adult",
        "tab_transformer.adult", "tabr.adult",
        "rul_attention.fd001", "testam.los_loop", "timbre_attention.fsdd", "ast_tiny.fsdd", "ssast_tiny.fsdd",
        "ssast_tiny.fsdd_full", "ssast_tiny.fsdd_ssl", "tfcam.physionet2012", "gat.cora", "cat.cora", "gat.citeseer",
        "cat.citeseer", "survival_fusion.metabric", "slot_autoencoder_micro_64.shapes"]
TEST_ITEMS = 2000  # in-distribution test inputs scored per tag (the card's test_false_alarm_rate uses all)
SHIFTED_ITEMS = 300
VITAL_SIGNS = ("HR", "SysABP", "DiasABP", "MAP", "NISysABP", "NIDiasABP", "NIMAP", "RespRate", "Temp")
NEAR_DIR = ROOT / "runs" / "near_shift"  # the near-shift models' run folders and data (trained once, reused)
NEAR_IMAGE_CLASSES = (["ship", "deer", "horse", "airplane", "automobile", "bird"],  # known (open_set split 1)
                      ["dog", "truck", "frog", "cat"])  # unknown
KNN_NEIGHBOURS = 50  # Sun et al.'s k on CIFAR-10; at most 5% of a smaller bank (a graph's 100 training nodes: 5)
BASELINES = ("MSP", "max logit", "energy", "KNN", "width")
OOD_HEADER = ["| tag | score | flagged in-distribution (n) | card's test false alarms | shifted set | "
              "AUROC ood_score | MSP | max logit | energy | KNN | width | best | flagged shifted (n) |",
              "|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---|---:|"]
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


class Scored(NamedTuple):
    """A set's ``ood_score`` (N,) and the outputs of the forward pass that scored it (features, logits: what the
    baselines read)."""

    ood_score: np.ndarray
    outputs: ood.SplitOutputs


def scored(model, detector, x, y: torch.Tensor | None = None, frame=None) -> Scored:
    """``x`` (N, ...) or a dict of them (targets ``y``, zeros when None) scored by ``detector``; ``frame``: a table's
    raw rows."""
    y = torch.zeros(len(next(iter(x.values())) if isinstance(x, dict) else x), dtype=torch.long) if y is None else y
    return Scored(*ood.scored_outputs(model, model.pretrained_cfg, detector, _loader(x, y), frame,
                                      features=hasattr(model, "forward_head")))


def _file_inputs(card, files: list[str]) -> torch.Tensor:
    """The model's inputs (N, ...) of ``files`` (WAVs), prepared as ``predict`` prepares them."""
    prepare = transform(card)
    return torch.stack([prepare(f) for f in files])


def _table_scored(model, detector, frame) -> Scored:
    """A table's raw rows (the training columns), prepared as ``predict`` prepares them, scored."""
    frame = frame.reset_index(drop=True)
    return scored(model, detector, transform(model.pretrained_cfg)(frame), frame=frame)


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


def scored_nodes(model, detector, graph, x: torch.Tensor | None = None, mask: torch.Tensor | None = None) -> Scored:
    """The test nodes of ``graph`` (the nodes of ``mask`` (N,) when given) scored, its node features replaced by
    ``x`` (N, F) when given; with the nodes' penultimate features when the model has them (for KNN)."""
    if x is not None or mask is not None:
        graph = graph.clone()
        graph.x = graph.x if x is None else x
        graph.test_mask = graph.test_mask if mask is None else mask
    out = ood.node_split_outputs(model, graph, features=hasattr(model, "forward_head"))["test"]
    return Scored(detector.score(out.components(detector)), out)


def node_scores(model, detector, graph, x: torch.Tensor | None = None) -> np.ndarray:
    """``ood_score`` of the test nodes of ``graph``, its node features replaced by ``x`` (N, F) when given."""
    return scored_nodes(model, detector, graph, x).ood_score


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


def shifted_sets(tag: str, model, detector, data, folder: Path) -> dict[str, Scored]:
    """Each far shifted set of ``tag``'s inputs (see the module docstring), scored."""
    card = model.pretrained_cfg
    kind, dataset = card.input_spec["kind"], tag.split(".")[1]
    generator = torch.Generator().manual_seed(0)

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
        return {name: scored(model, detector, s) for name, s in sets.items()}
    if kind == "table":
        rows = data.frames["test"].head(SHIFTED_ITEMS).drop(columns=[card.input_spec["preprocessor"]["target"]])
        return {"age x10, hours x20": _table_scored(model, detector, rows.assign(
                    age=rows["age"] * 10, hours_per_week=rows["hours_per_week"] * 20)),
                "unseen work class": _table_scored(model, detector, rows.assign(workclass="Astronaut"))}
    if kind == "sensor_series":
        x, y = _tensors(data.test_dataloader(), SHIFTED_ITEMS)
        return {"drifting sensors": scored(model, detector, drifting_sensors(x, generator), y)}
    if kind == "traffic_series":  # (S, T, N, [speed, time of day]), speeds standardised by the training mean, std
        x, y = _tensors(data.test_dataloader(), SHIFTED_ITEMS)
        permuted = permuted_sensors(x, generator)
        mean, std = card.input_spec["mean"], card.input_spec["std"]
        km_h = x.clone()
        km_h[..., 0] = ((x[..., 0] * std + mean) * 1.609344 - mean) / std
        return {"sensors permuted": scored(model, detector, permuted, y), "speeds in km/h": scored(model, detector,
                                                                                                   km_h, y)}
    if kind == "icu_stays":
        x, y = _tensors(data.test_dataloader(), SHIFTED_ITEMS)
        return {"vital signs x3": scored(model, detector, _scaled_vital_signs(x, card.input_spec, 3.0), y)}
    if kind == "graph":
        graph = data.graph
        swapped = graph.x.to_dense()[torch.randperm(graph.num_nodes, generator=generator)]
        return {"shuffled feature entries": scored_nodes(model, detector, graph,
                                                         shuffled_node_features(graph.x, generator)),
                "another node's features": scored_nodes(model, detector, graph, swapped)}
    if kind == "survival_table":
        rows = survival_rows(data).head(SHIFTED_ITEMS)
        prepare = transform(card)
        return {name: scored(model, detector, prepare(frame)) for name, frame in
                {"age x3": rows.assign(age=rows["age"] * 3), "empty gene (MKI67)": rows.assign(MKI67=np.nan)}.items()}
    if kind == "scene":
        x, y = _tensors(data.test_dataloader(), SHIFTED_ITEMS)
        sets = {"CIFAR-10 at 64x64": cifar10_scenes(len(x), x.shape[-1]),
                "uniform noise": torch.rand(x.shape, generator=generator) * 2 - 1}
        return {name: scored(model, detector, s, y) for name, s in sets.items()}
    if kind == "audio":
        rng, t = np.random.default_rng(0), np.arange(4000) / 8000
        noise, tones = [], []
        for i in range(50):
            _write_wav(folder / f"noise{i}.wav", rng.normal(0, 0.3, len(t)))
            _write_wav(folder / f"tone{i}.wav", 0.5 * np.sin(2 * np.pi * (200 + 60 * i) * t))
            noise.append(str(folder / f"noise{i}.wav"))
            tones.append(str(folder / f"tone{i}.wav"))
        return {"white noise": scored(model, detector, _file_inputs(card, noise)),
                "pure tones": scored(model, detector, _file_inputs(card, tones))}
    raise ValueError(f"no shifted sets for inputs of kind {kind!r}")


def _auroc(inside: np.ndarray, outside: np.ndarray) -> float:
    from sklearn.metrics import roc_auc_score

    scores = np.nan_to_num(np.concatenate([inside, outside]), posinf=1e12)
    return float(roc_auc_score(np.r_[np.zeros(len(inside)), np.ones(len(outside))], scores))


def in_distribution(model, detector, data) -> Scored:
    """The in-distribution test inputs scored: the first :data:`TEST_ITEMS` (all rows of a table or survival
    table, all test nodes of a graph)."""
    card = model.pretrained_cfg
    kind = card.input_spec["kind"]
    if kind == "table":
        return Scored(*ood.scored_outputs(model, card, detector, data.test_dataloader(), data.frames["test"],
                                          features=hasattr(model, "forward_head")))
    if kind == "survival_table":  # batches of named inputs, all test rows
        return Scored(*ood.scored_outputs(model, card, detector, data.test_dataloader(),
                                          features=hasattr(model, "forward_head")))
    if kind == "graph":
        return scored_nodes(model, detector, data.graph)
    return scored(model, detector, *_tensors(data.test_dataloader(), TEST_ITEMS))


def knn_bank(model, detector, data) -> torch.Tensor | None:
    """The penultimate features of the training split (at most :data:`hub.uncertainty.ood.MAX_FIT_ITEMS` items, the ones
    the detector's statistics were fitted on; a graph's training nodes), or None for a model without them."""
    card = model.pretrained_cfg
    if card.input_spec["kind"] == "graph":
        return ood.node_split_outputs(model, data.graph, features=True)["train"].features \
            if hasattr(model, "forward_head") else None
    if not hasattr(model, "forward_head"):
        return None
    return ood.training_outputs(model, card, data, ["mahalanobis"]).features  # "mahalanobis": the features it reads


def interval_widths(card, outputs: torch.Tensor) -> np.ndarray:
    """(N,) the mean width of the card's 90% conformal intervals over each item's ``outputs`` (N, K, ...) (a traffic
    forecast's horizons and sensors), in the target's units: wide where the model is unsure."""
    names = card.calibration["conformal"]["outputs"]
    scale, shift = conformal.target_units(card.input_spec)
    values = outputs.double().reshape(len(outputs), len(names), -1).transpose(1, 2).reshape(-1, len(names))
    _, bounds = conformal.interval_columns(card, names, values * scale + shift)  # (N * rest, 3K)
    return (bounds[:, 2::3] - bounds[:, 1::3]).reshape(len(outputs), -1).mean(1).numpy()


def baseline_scores(card, outputs: ood.SplitOutputs, bank: torch.Tensor | None) -> dict[str, np.ndarray]:
    """The plain baselines of :data:`BASELINES` that ``outputs`` allow (higher: more unusual): MSP, max logit and
    energy of a classifier's logits, KNN of penultimate features against ``bank``, the interval width of a regression
    with conformal intervals in its card."""
    found = {}
    if card.label_names and outputs.logits is not None:
        found.update({"MSP": ood.max_softmax_score(outputs.logits).numpy(),
                      "max logit": ood.max_logit_score(outputs.logits).numpy(),
                      "energy": ood.energy(outputs.logits).numpy()})
    if bank is not None and outputs.features is not None:
        found["KNN"] = ood.knn_score(outputs.features, bank, min(KNN_NEIGHBOURS, max(1, len(bank) // 20))).numpy()
    if "half_width" in card.calibration.get("conformal", {}) and outputs.logits is not None:
        found["width"] = interval_widths(card, outputs.logits)
    return found


def aurocs(card, inside: Scored, shifted: Scored, bank: torch.Tensor | None) -> dict[str, float]:
    """The AUROC of ``ood_score`` and of each baseline the model allows (:func:`baseline_scores`) for telling the
    ``shifted`` set from the ``inside`` one."""
    inside_baselines, shifted_baselines = (baseline_scores(card, s.outputs, bank) for s in (inside, shifted))
    return {"ood_score": _auroc(inside.ood_score, shifted.ood_score),
            **{b: _auroc(inside_baselines[b], shifted_baselines[b]) for b in inside_baselines}}


def rows_of(label: str, card, detector, inside: Scored, sets: dict[str, Scored], bank: torch.Tensor | None,
            false_alarms: float) -> list[str]:
    """The OOD table's rows of one model (``label``): per shifted set, the AUROC of ``ood_score`` and of each
    baseline, the best, the flagged shares; ``false_alarms``: the card's test false-alarm rate."""
    rows = []
    for name, shifted in sets.items():
        found = aurocs(card, inside, shifted, bank)
        cells = [f"{found[b]:.3f}" if b in found else "—" for b in ("ood_score", *BASELINES)]
        rows.append(f"| {label} | {card.ood['score']} | {detector.flag(inside.ood_score).mean():.1%} "
                    f"({len(inside.ood_score)}) | {false_alarms:.1%} | {name} | {' | '.join(cells)} | "
                    f"{', '.join(b for b in found if round(found[b], 3) == round(max(found.values()), 3))} | "
                    f"{detector.flag(shifted.ood_score).mean():.1%} "
                    f"({len(shifted.ood_score)}) |")
    return rows


def ood_rows(tag: str, model, data) -> list[str]:
    """The OOD table's rows of ``tag``."""
    card = model.pretrained_cfg
    detector = ood.load_detector(card)
    if detector is None:
        return [f"| {tag} | {card.ood.get('score', 'not fitted')} | - | - | - | - | - | - | - | - | - | - | - |"]
    inside, bank = in_distribution(model, detector, data), knn_bank(model, detector, data)
    with tempfile.TemporaryDirectory() as folder:
        sets = shifted_sets(tag, model, detector, data, Path(folder))
    return rows_of(tag, card, detector, inside, sets, bank, card.ood["test_false_alarm_rate"])


# ---- near shifts: models trained here on part of the data, scored on the rest --------------------------------------

def near_run(recipe: str, name: str, overrides: list[str]) -> Path:
    """The finished run folder of ``recipe`` with ``overrides`` under :data:`NEAR_DIR` / ``name`` (the latest),
    trained now when there is none."""
    from hub.run.train import train

    done = sorted((NEAR_DIR / name).glob("*/card.json"))
    if done:
        return done[-1].parent
    return train(str(ROOT / recipe), [*overrides, f"output_dir={NEAR_DIR}", f"name={name}"], progress=False)


def _open_graph_folder(dataset: str, held_out: list[int], folder: Path) -> torch.Tensor:
    """Write Planetoid graph ``dataset`` as a graph folder (``graph.data``'s format) whose nodes of the ``held_out``
    classes are unlabelled and in no split (the public split's other nodes keep theirs); returns the mask (N,) of
    the held-out classes' public test nodes."""
    import pandas as pd

    from graph.data import read_planetoid

    raw = read_planetoid(dataset)
    known = ~torch.isin(raw.y, torch.tensor(held_out))
    split = np.full(raw.num_nodes, "", dtype=object)
    for name in ("train", "val", "test"):
        split[(raw[f"{name}_mask"] & known).numpy()] = name
    if not folder.is_dir():
        with atomic_folder(folder) as written:
            nodes = pd.DataFrame(raw.x.to_dense().numpy(), columns=[f"f{i}" for i in range(raw.x.shape[1])])
            nodes.insert(0, "id", [f"n{i}" for i in range(raw.num_nodes)])
            nodes["label"] = np.where(known.numpy(), raw.y.numpy().astype(str), "")
            nodes["split"] = split
            nodes.to_csv(written / "nodes.csv", index=False, float_format="%g")
            pd.DataFrame({"src": [f"n{i}" for i in raw.edge_index[0].tolist()],
                          "dst": [f"n{i}" for i in raw.edge_index[1].tolist()]}).to_csv(written / "edges.csv",
                                                                                          index=False)
    return raw.test_mask & ~known


def near_graph(dataset: str, held_out: list[int]) -> tuple[str, Path, dict]:
    """gat on Planetoid graph ``dataset`` without the labels of the ``held_out`` classes (module docstring)."""
    name = f"gat_{dataset.lower()}_without_{'_'.join(map(str, held_out))}"
    folder = NEAR_DIR / "data" / name
    unknown = _open_graph_folder(dataset, held_out, folder)
    run = near_run(f"recipes/graph/gat_{dataset.lower()}.yaml", name,
                   ["data.name=graph_folder", f"data.args={{root: {folder}, normalize: true}}"])
    classes = ", ".join(map(str, held_out))
    return (f"gat on {dataset} without classes {classes}", run,
            {f"near: classes {classes} (test nodes)": lambda model, detector, data:
             scored_nodes(model, detector, data.graph, mask=unknown)})


def near_audio() -> tuple[str, Path, dict]:
    """ast_tiny on FSDD's digits 0-4, given the test speaker's digits 5-9. Trained at one intra-op thread, as it was
    measured: the run's weights depend on the thread count (at torch's default two threads on 2026-12-06 it tested
    0.988 and its ood_score ranked the digits 5-9 at AUROC 0.918 against MSP's 0.939)."""
    recordings = local_copy("fsdd", "recordings") / "recordings"
    run = near_run("recipes/audio/ast_tiny_fsdd_digits_0_4.yaml", "ast_tiny_fsdd_digits_0_4",
                   ["trainer.num_threads=1"])

    def digits_5_9(model, detector, data) -> Scored:
        speaker = model.pretrained_cfg.data["args"]["test_speaker"]
        files = sorted(str(p) for d in range(5, 10) for p in recordings.glob(f"{d}_{speaker}_*.wav"))
        return scored(model, detector, _file_inputs(model.pretrained_cfg, files))

    return "ast_tiny on FSDD digits 0-4", run, {"near: digits 5-9 (test speaker)": digits_5_9}


def near_images() -> tuple[str, Path, dict]:
    """airbench_cbam_32.cifar10 fine-tuned as a user would (``attnhub finetune --policy linear-probe``) on 6 of
    CIFAR-10's classes (:data:`NEAR_IMAGE_CLASSES`, the open-set benchmark's split 1, where the gated combination
    missed by most): 500 ``train_rest/`` images per class (never seen by the tag) as class folders, 300 test
    images per class as ``test/``; given 300 test images of each of the 4 other classes. The tag's backbone was
    trained on all 10 classes, so the unknowns are unknown to the head only: a check of how the scores combine, not a
    replacement for ``benchmarks/open_set.py`` (models trained without the unknowns, half an hour each)."""
    from hub.finetune import finetune

    known, unknown = NEAR_IMAGE_CLASSES
    folder, name = NEAR_DIR / "data" / "cifar10_six_classes", "airbench_cbam_cifar10_six_classes"
    cifar = local_copy("cifar10", *(f"{split}/{label}" for split in ("train_rest", "test")
                                    for label in known + unknown))
    if not folder.is_dir():
        with atomic_folder(folder) as written:
            for split, source, count in (("train", "train_rest", 500), ("test", "test", 300)):
                for label in known:
                    target = written / split / label
                    target.mkdir(parents=True)
                    for path in sorted((cifar / source / label).glob("*.jpg"))[:count]:
                        target.joinpath(path.name).write_bytes(path.read_bytes())
    done = sorted((NEAR_DIR / name).rglob("card.json"))  # finetune's run folder: <output_dir>/<run name>/<stamp>
    run = done[-1].parent if done else finetune(
        "airbench_cbam_32.cifar10", str(folder), ["seed=0", "trainer.accelerator=cpu"], str(NEAR_DIR / name),
        progress=False, policy="linear-probe", cv_folds=0)[0]  # the detector's shift, not the predictor's choice

    def other_classes(model, detector, data) -> Scored:
        files = [str(p) for label in unknown for p in sorted((cifar / "test" / label).glob("*.jpg"))[:300]]
        return scored(model, detector, _file_inputs(model.pretrained_cfg, files))

    return ("airbench_cbam_32.cifar10, linear probe on 6 classes", run,
            {f"near: classes {', '.join(unknown)} (test images)": other_classes})


def near_table() -> tuple[str, Path, dict]:
    """mlp on Adult's rows of people born in the United States, given the rows of people born elsewhere."""
    import pandas as pd

    adult = card_data(model_card("mlp.adult"))
    rows = pd.concat([adult.frames[s] for s in ("train", "val", "test")], ignore_index=True)
    born_us = rows["native_country"] == "United-States"
    path = NEAR_DIR / "data" / "adult_born_us.csv"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, rows[born_us].drop(columns=["native_country"]).to_csv(index=False).encode())
    run = near_run("recipes/tabular/mlp_adult.yaml", "mlp_adult_born_us",
                   ["data.name=tabular_csv", f"data.args={{path: {path}, target: income, batch_size: 512, "
                                             "split_seed: 0, scaling: quantile}"])
    elsewhere = rows[~born_us & rows["native_country"].notna()].drop(columns=["native_country", "income"])
    return ("mlp on Adult, people born in the US", run,
            {"near: people born elsewhere": lambda model, detector, data: _table_scored(model, detector, elsewhere)})


def near_rul() -> tuple[str, Path, dict]:
    """rul_attention on FD001's longer-lived half of the training engines (unit CSVs, split by engine as a user's
    folder is, the kind's default 40 epochs), given engines of the shorter-lived half cut at random cycles, as
    FD001's test engines are: each engine's last 30-cycle window before its cut, scaled as ``predict`` scales."""
    import pandas as pd

    from timeseries.data import read_cmapss_units

    units = read_cmapss_units("train_FD001.txt")
    lives = {u: len(series) for u, series in units.items()}
    median = float(np.median(list(lives.values())))
    sensors = [f"sensor_{i}" for i in range(1, 22)]
    folder = NEAR_DIR / "data" / "fd001_longer_lived"
    if not folder.is_dir():
        with atomic_folder(folder) as written:
            for unit, series in units.items():
                if lives[unit] > median:
                    frame = pd.DataFrame(series, columns=sensors)
                    frame.insert(0, "cycle", np.arange(1, len(series) + 1))
                    frame.to_csv(written / f"engine_{unit:03d}.csv", index=False)
    run = near_run("recipes/timeseries/rul_attention_fd001.yaml", "rul_attention_fd001_longer_lived",
                   ["data.name=sensor_units", f"data.args={{root: {folder}, window: 30, horizon: 10, rul_cap: 125, "
                                              "batch_size: 128}", "trainer.max_epochs=40"])

    def shorter_lived(model, detector, data) -> Scored:
        card, rng = model.pretrained_cfg, np.random.default_rng(0)
        prepare, window = transform(card), card.input_spec["window"]
        short = [u for u in sorted(units) if lives[u] <= median]
        windows = []
        for unit in short:
            frame = pd.DataFrame(units[unit], columns=sensors)
            frame.insert(0, "cycle", np.arange(1, lives[unit] + 1))
            for cut in rng.integers(window, lives[unit] + 1, SHIFTED_ITEMS // len(short) + 1):
                windows.append(prepare(frame.head(int(cut))))
        x = torch.stack(windows[:SHIFTED_ITEMS])
        return scored(model, detector, x, torch.zeros(len(x), card.input_spec["horizon"]))

    return (f"rul_attention on FD001 engines living over {median:.0f} cycles", run,
            {f"near: engines failing within {median:.0f} cycles": shorter_lived})


def swapped_sensors(x: torch.Tensor, share: float, generator: torch.Generator) -> torch.Tensor:
    """Traffic windows ``x`` (S, T, N sensors, C) with ``share`` of the sensors swapped in pairs (the same pairs in
    every window): each swapped series is a real one of the network, read at another road."""
    chosen = torch.randperm(x.shape[2], generator=generator)[:2 * max(1, round(share * x.shape[2] / 2))]
    order = torch.arange(x.shape[2])
    order[chosen] = chosen.view(-1, 2).flip(1).reshape(-1)
    return x[:, :, order]


def near_traffic() -> tuple[str, str, dict]:
    """The shipped testam.los_loop (no model trained for it: the shift needs none), given its test windows with 10%
    of the sensors swapped in pairs: the near case of the far "sensors permuted" (all of them)."""
    def swapped(model, detector, data) -> Scored:
        x, y = _tensors(data.test_dataloader(), SHIFTED_ITEMS)
        return scored(model, detector, swapped_sensors(x, 0.1, torch.Generator().manual_seed(0)), y)

    return "testam.los_loop (shipped)", "testam.los_loop", {"near: 10% of sensors swapped in pairs": swapped}


NEAR = {"cora": lambda: near_graph("Cora", [5, 6]), "citeseer": lambda: near_graph("CiteSeer", [4, 5]),
        "cifar10": near_images, "fsdd": near_audio, "adult": near_table, "fd001": near_rul, "los_loop": near_traffic}


class NearShift(NamedTuple):
    """A near shift measured: its model's ``label``, card and detector, its test split and near sets scored, and
    the KNN bank."""

    label: str
    card: object
    detector: ood.Detector
    inside: Scored
    sets: dict[str, Scored]
    bank: torch.Tensor | None


def near_shift(key: str) -> NearShift:
    """The near shift :data:`NEAR` [``key``]: its model trained (or reused), its detector the one fitted at the end
    of training, the near sets and its test split scored."""
    label, run, sets = NEAR[key]()
    model = (load_run(run) if isinstance(run, Path) else hub.load(run)).eval()  # a run folder, or a shipped tag
    card, detector = model.pretrained_cfg, ood.load_detector(model.pretrained_cfg)
    data = card_data(card)
    data.setup("fit")
    inside, bank = in_distribution(model, detector, data), knn_bank(model, detector, data)
    shifted = {name: score(model, detector, data) for name, score in sets.items()}
    return NearShift(label, card, detector, inside, shifted, bank)


def near_rows(key: str) -> tuple[str, list[str]]:
    """``(label, rows)`` of the near shift :data:`NEAR` [``key``] (:func:`near_shift`)."""
    near = near_shift(key)
    return near.label, rows_of(near.label, near.card, near.detector, near.inside, near.sets, near.bank,
                               near.card.ood["test_false_alarm_rate"])


def calibration_row(tag: str, model, data) -> str:
    """The calibration table's row of ``tag``: the card's ``calibration`` when it holds the figures, else
    :func:`hub.uncertainty.conformal.fit` on the validation split here (the card is not changed)."""
    from hub.tasks import create_task

    calibration, source = model.pretrained_cfg.calibration, "card"
    if "test" not in calibration and "half_width" not in calibration.get("conformal", {}):
        task = create_task(data.task, **data.task_args())
        calibration, source = conformal.fit(model, data, task, progress=False), "fitted by this script"
    if "temperature" in calibration:
        val, test = calibration["val"], calibration["test"]
        return (f"| {tag} | temperature {calibration['temperature']:.3f} | {val['ece']:.3f} / "
                f"{val['ece_calibrated']:.3f} | {test['ece']:.3f} / {test['ece_calibrated']:.3f} | "
                f"{test['nll']:.3f} / {test['nll_calibrated']:.3f} | - | - | {source} |")
    section = calibration.get("conformal", {})
    if "half_width" not in section:
        return f"| {tag} | none: {section.get('skipped', 'no outputs to calibrate')} | - | - | - | - | - | - |"
    if section.get("fitted_on", "validation split") != "validation split":
        source += " (cross-fitted residuals, `hub/uncertainty/cross_conformal.py`)"
    return (f"| {tag} | {section['method'].split(',')[0]}, {len(section['outputs'])} outputs | - | - | - | "
            f"{section['test_coverage']['0.9']:.1%} | {section['test_mean_width']['0.9']:.2f} | {source} |")


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


FAR_AUROC, FALSE_ALARMS, TIE = 0.95, 0.02, 0.01  # issue 47's targets: far-shift AUROC, false alarms, near-shift tie
# why a target is missed: (a part of the row's model, a part of its set or "(in-distribution)" for its false alarms,
# why), written when a run showed the miss, kept as data so that the section below names every miss, explained or not
MISS_REASONS = [
    ("fsdd", "(in-distribution)", "FSDD's test split is one speaker not heard in training, while the threshold comes "
                                  "from the training speakers' validation clips: the flagged share is a speaker shift, "
                                  "not a false-alarm rate"),
    ("testam.los_loop", "(in-distribution)", "the split is in time order, and the test windows (the last 20% of the "
                                             "week) hold congestion unlike the training days' (the range check flags "
                                             "4.5%, the sensors' order 3.0%)"),
    ("testam.los_loop", "speeds in km/h", "a km/h speed of a slow road is within the range of the network's mph "
                                          "speeds, and in the sensors' order"),
    ("breastmnist", "(in-distribution)", "156 test scans (one is 0.6%) and a threshold from the 99% quantile of 78 "
                                         "validation scans"),
    ("", "another node's features", "every input is a real node's features beside the wrong neighbours, a near shift "
                                    "in all but name; no baseline reaches 0.95 either"),
    ("rul_attention on FD001", "(in-distribution)", "the test split is 7 engines (1,508 windows, each engine's "
                                                    "alike) and the threshold comes from 6 validation engines"),
    ("rul_attention on FD001", "near:", "a window of an engine that fails sooner looks like one of an engine that "
                                        "fails later: no score tells them apart (all near chance)"),
]


def target_misses(rows: list[str]) -> list[str]:
    """Issue 47's targets checked on the OOD table's ``rows``: each miss, with its reason from :data:`MISS_REASONS`
    (or 'not explained')."""
    misses, alarms_seen = [], set()
    for row in rows:
        cells = [c.strip() for c in row.strip("| ").split(" | ")]
        label, alarms, shifted = cells[0], float(cells[3].rstrip("%")) / 100, cells[4]
        found = {name: float(v) for name, v in zip(("ood_score", *BASELINES), cells[5:11]) if v != "—"}
        if shifted.startswith("near:"):
            plain = [found[b] for b in ("MSP", "energy", "width") if b in found]
            if plain and found["ood_score"] < max(plain) - TIE:
                misses.append((label, shifted, f"near shift: ood_score {found['ood_score']:.3f} below the best of "
                                               f"MSP, energy and width ({max(plain):.3f})"))
        elif found["ood_score"] < FAR_AUROC:
            misses.append((label, shifted, f"far shift: ood_score {found['ood_score']:.3f} < {FAR_AUROC}"))
        if alarms > FALSE_ALARMS and label not in alarms_seen:
            alarms_seen.add(label)
            misses.append((label, "(in-distribution)", f"false alarms {alarms:.1%} on the test split > "
                                                       f"{FALSE_ALARMS:.0%}"))
    return [f"| {label} | {shifted} | {miss} | "
            f"{next((why for m, s, why in MISS_REASONS if m in label and s in shifted), 'not explained')} |"
            for label, shifted, miss in misses]


def write_report(path: Path, ood_table: list[str], calibration_table: list[str], measured: list[str]) -> None:
    """Write the report at ``path``: its rows of the ``measured`` tags replaced by these tables' (:func:`merged`)."""
    old = path.read_text().splitlines() if path.is_file() else []
    ood_rows_all = merged(table_rows(old, OOD_HEADER), ood_table, measured)
    lines = ["# Uncertainty of the shipped tags", "",
             "Written by `python -m benchmarks.uncertainty` (a run rewrites the rows of the tags it measures and keeps "
             "the others).", "",
             "## Out-of-distribution scores", "",
             "Scores and thresholds: `hub/uncertainty/ood.py`; threshold at the 99th percentile of the validation "
             "split's scores (a 1% false-alarm rate); the scores combined as the card's `ood.combine` says (`excess` "
             "everywhere: every shipped tag's detector was refitted on 2026-12-06, its weights unchanged). "
             f"Flagged in-distribution: the first {TEST_ITEMS} test inputs "
             "(all rows for tables and survival tables, all test nodes of a graph); card: the whole test split, as the "
             "card records it. AUROC: of `ood_score`, the shifted set "
             f"(at most {SHIFTED_ITEMS} inputs; a near set's: all of it) against those test inputs, then of the plain "
             "baselines from the same forward pass: MSP (one minus the maximum softmax probability), max logit and "
             "energy of a classifier's logits; KNN, the distance to the 50th nearest training feature (normalised "
             f"penultimate features of at most {ood.MAX_FIT_ITEMS} training items, k at most 5% of a smaller bank: "
             "a graph's training nodes); width, the mean width of a regression's 90% conformal interval; '—' where "
             "the model has none; best: the highest AUROC of the row (ties at three decimals all named). Far "
             "shifts are the rows of the shipped tags; near shifts ('near: ...') are inputs of the same source that "
             "a model trained here without them was not trained on (held-out classes of a graph, CIFAR-10 classes "
             "held out of a linear probe's head, FSDD digits 5-9 for "
             "a model of digits 0-4, Adult's people born outside the US for a model of those born there, FD001 engines "
             "that fail sooner for a model of those that fail later, Los-loop windows with 10% of the sensors swapped "
             "for the shipped model; `benchmarks/uncertainty.py`), its detector fitted at the end of training as "
             "every run's is; CIFAR-10's classes held out of whole models are in `open_set.md`. FSDD's "
             "test split is a speaker not heard in "
             "training (the validation split holds the training speakers' clips), so its flagged share is a "
             "speaker shift, not a false-alarm rate. Los-loop's shifted windows come from Los-loop itself: no other "
             "road network's speeds are here; its split is in time order, and its test windows (the last 20% of "
             "the week) hold congestion unlike the training days' (7.5% flagged: the range check 4.5%, the "
             "sensors' order 3.0%).", "",
             *OOD_HEADER, *ood_rows_all, "",
             "### Targets missed", "",
             f"Issue 47's targets: on a near shift, `ood_score`'s AUROC at least the best of MSP and energy (a "
             f"regression's interval width) less {TIE}; on a far shift at least {FAR_AUROC}; at most "
             f"{FALSE_ALARMS:.0%} of the test split flagged (the card's rate). Each miss of the table above, and why "
             "(`MISS_REASONS` in `benchmarks/uncertainty.py`):", "",
             "| model | shifted set | missed | why |", "|---|---|---|---|", *target_misses(ood_rows_all), "",
             "## Calibration and intervals", "",
             "Classifiers: temperature scaling fitted on the validation split; expected calibration error (15 "
             "equal-width bins) and NLL before / after dividing the logits by the temperature. Regressions: 90% "
             "Mondrian split conformal intervals (per output, half widths from the validation residuals in up to "
             f"{conformal.MAX_BINS} bins of the predicted value, `hub/uncertainty/conformal.py`; rul_attention.fd001's "
             "from the residuals of four more runs of its recipe on 25% of the engines each, as its validation split "
             "holds 5 engines, `hub/uncertainty/cross_conformal.py`); coverage and mean width "
             "(in the target's units: cycles of RUL, mph) on the test split, over every output and sensor. "
             "Source: the card's `calibration`, or fitted by this script when the card holds no figures (the card "
             "is not changed).", "",
             *CALIBRATION_HEADER, *merged(table_rows(old, CALIBRATION_HEADER), calibration_table, measured)]
    atomic_write_bytes(path, ("\n".join(lines) + "\n").encode())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tags", nargs="*", default=TAGS, help="shipped tags to measure (none: only --near)")
    parser.add_argument("--near", nargs="*", default=list(NEAR), choices=list(NEAR),
                        help="near shifts to measure (none: only --tags)")
    args = parser.parse_args()
    path = RESULTS / "uncertainty.md"
    for tag in args.tags:  # the report is written after each tag: a long run keeps what it measured
        model = hub.load(tag).eval()
        data = card_data(model.pretrained_cfg)
        data.setup("fit")
        ood_table, calibration = ood_rows(tag, model, data), calibration_row(tag, model, data)
        write_report(path, ood_table, [calibration], [tag])
        print(*ood_table, calibration, sep="\n", flush=True)
    for key in args.near:
        label, ood_table = near_rows(key)
        write_report(path, ood_table, [], [label])
        print(*ood_table, sep="\n", flush=True)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
