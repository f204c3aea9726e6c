"""How well the shipped tags' out-of-distribution scores (:mod:`hub.ood`) tell their own test inputs from shifted
ones. Per tag: the score its card names, the share of in-distribution test inputs flagged (the false-alarm rate,
configured at 1%), and per shifted set the AUROC of ``ood_score`` for separating it from the test inputs and the
share of it flagged. Writes ``benchmarks/results/uncertainty.md``.

    HUB_DATA_DIR=../shared/data python -m benchmarks.uncertainty [--tags vit_digits.sklearn mlp.adult ...]

Shifted sets: images of noise, the digits' negatives, BreastMNIST scans for a CIFAR-10 model; table rows whose age
and hours per week are scaled far past the training range, or with a work class never seen in training; sensor
windows drifting by half a sensor's training range in random directions; WAV files of noise and of pure tones;
graph nodes (the test nodes of Cora or CiteSeer) whose feature entries are shuffled within each node, or whose
features are another node's (every node's, at random); survival-table patients (METABRIC's test rows) aged three
times their age, or with an empty gene cell (MKI67); for a slot autoencoder, CIFAR-10 test images resized to the
scenes' 64x64, and uniform noise.
"""
from __future__ import annotations

import argparse
import tempfile
import wave
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset

import hub
from benchmarks import RESULTS
from hub import ood
from hub.io import atomic_write_bytes
from hub.models import model_card
from hub.recipe import card_data

TAGS = ["vit_digits.sklearn", "vit_micro_patch4_32.cifar10", "mlp.adult", "tabm.adult", "tab_transformer.adult",
        "tabr.adult", "rul_attention.fd001",
        "timbre_attention.fsdd", "gat.cora", "cat.cora", "gat.citeseer", "cat.citeseer", "survival_fusion.metabric",
        "slot_autoencoder_micro_64.shapes"]
TEST_ITEMS = 2000  # in-distribution test inputs scored per tag (the card's test_false_alarm_rate uses all)
SHIFTED_ITEMS = 300


def _tensors(loader, limit: int) -> tuple[torch.Tensor, torch.Tensor]:
    xs, ys = [], []
    for x, y in loader:
        xs.append(x)
        ys.append(y)
        if sum(len(b) for b in ys) >= limit:
            break
    return torch.cat(xs)[:limit], torch.cat(ys)[:limit]


def _loader(x: torch.Tensor, y: torch.Tensor) -> DataLoader:
    return DataLoader(TensorDataset(x, y), batch_size=256)


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
    kind, card = model.pretrained_cfg.input_spec["kind"], model.pretrained_cfg
    generator = torch.Generator().manual_seed(0)
    if kind == "image":
        x, y = _tensors(data.test_dataloader(), SHIFTED_ITEMS)
        sets = {"uniform noise": torch.rand(x.shape, generator=generator) * 2 * x.abs().amax() - x.abs().amax()}
        if "cifar10" in tag:
            sets["BreastMNIST"] = _tensors(card_data(model_card("vit_micro_patch4_32.breastmnist")).test_dataloader(),
                                           SHIFTED_ITEMS)[0]
        else:
            sets["inverted digits"] = -x
        return {name: ood.score_inputs(model, card, detector, _loader(s, y[:len(s)])) for name, s in sets.items()}
    if kind == "table":
        rows = data.frames["test"].head(SHIFTED_ITEMS).drop(columns=[card.input_spec["preprocessor"]["target"]])
        return {"age x10, hours x20": _table_scores(model, rows.assign(age=rows["age"] * 10,
                                                                         hours_per_week=rows["hours_per_week"] * 20),
                                                    folder),
                "unseen work class": _table_scores(model, rows.assign(workclass="Astronaut"), folder)}
    if kind == "sensor_series":
        x, y = _tensors(data.test_dataloader(), SHIFTED_ITEMS)
        direction = torch.randint(0, 2, (len(x), 1, x.shape[2]), generator=generator) * 2 - 1
        drift = 0.5 * direction * torch.linspace(0, 1, x.shape[1])[None, :, None]
        return {"drifting sensors": ood.score_inputs(model, card, detector, _loader(x + drift, y))}
    if kind == "audio":
        rng, t = np.random.default_rng(0), np.arange(4000) / 8000
        noise, tones = [], []
        for i in range(50):
            _write_wav(folder / f"noise{i}.wav", rng.normal(0, 0.3, len(t)))
            _write_wav(folder / f"tone{i}.wav", 0.5 * np.sin(2 * np.pi * (200 + 60 * i) * t))
            noise.append(str(folder / f"noise{i}.wav"))
            tones.append(str(folder / f"tone{i}.wav"))
        return {"white noise": _file_scores(model, noise), "pure tones": _file_scores(model, tones)}
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
    raise ValueError(f"no shifted sets for inputs of kind {kind!r}")


def _auroc(inside: np.ndarray, outside: np.ndarray) -> float:
    from sklearn.metrics import roc_auc_score

    scores = np.nan_to_num(np.concatenate([inside, outside]), posinf=1e12)
    return float(roc_auc_score(np.r_[np.zeros(len(inside)), np.ones(len(outside))], scores))


def measure(tag: str) -> list[str]:
    """The report's rows of ``tag``."""
    model = hub.load(tag)
    detector = ood.load_detector(model.pretrained_cfg)
    data = card_data(model.pretrained_cfg)
    data.setup("fit")
    if model.pretrained_cfg.input_spec["kind"] == "table":
        inside = ood.score_inputs(model, model.pretrained_cfg, detector, data.test_dataloader(), data.frames["test"])
    elif model.pretrained_cfg.input_spec["kind"] == "survival_table":  # batches of named inputs, all test rows
        inside = ood.score_inputs(model, model.pretrained_cfg, detector, data.test_dataloader())
    elif model.pretrained_cfg.input_spec["kind"] == "graph":
        inside = node_scores(model, detector, data.graph)
    else:
        inside = ood.score_inputs(model, model.pretrained_cfg, detector, _loader(*_tensors(data.test_dataloader(),
                                                                                            TEST_ITEMS)))
    section = model.pretrained_cfg.ood
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for name, scores in shifted_scores(tag, model, detector, data, Path(folder)).items():
            rows.append(f"| {tag} | {section['score']} | {detector.flag(inside).mean():.1%} ({len(inside)}) | "
                        f"{section['test_false_alarm_rate']:.1%} | {name} | {_auroc(inside, scores):.3f} | "
                        f"{detector.flag(scores).mean():.1%} ({len(scores)}) |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tags", nargs="+", default=TAGS)
    args = parser.parse_args()
    lines = ["# Out-of-distribution scores of the shipped tags", "",
             "Written by `python -m benchmarks.uncertainty`. Scores and thresholds: `hub/ood.py`; threshold at the "
             "99th percentile of the validation split's scores (a 1% false-alarm rate). Flagged in-distribution: "
             f"the first {TEST_ITEMS} test inputs (all rows for tables and survival tables, all test nodes of a "
             "graph); card: the whole test split, as the card "
             "records it. FSDD's test split is a speaker not heard in training (the validation split holds the "
             "training speakers' clips), so its flagged share is a speaker shift, not a false-alarm rate.", "",
             "| tag | score | flagged in-distribution (n) | card's test false alarms | shifted set | AUROC | "
             "flagged shifted (n) |",
             "|---|---|---:|---:|---|---:|---:|"]
    for tag in args.tags:
        rows = measure(tag)
        lines += rows
        print("\n".join(rows), flush=True)
    atomic_write_bytes(RESULTS / "uncertainty.md", ("\n".join(lines) + "\n").encode())
    print(f"wrote {RESULTS / 'uncertainty.md'}")


if __name__ == "__main__":
    main()
