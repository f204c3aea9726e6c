"""``hub.transforms(name)`` on the public raw files of the shared datasets: raw data in gives the card's test
metric out (of the shipped weights: the card's first seed), for every shipped tag of the kinds covered here."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from sklearn.metrics import accuracy_score, roc_auc_score

import hub
from hub.data import data_dir
from hub.errors import DatasetUnavailable
from tests.unit.test_transforms import assert_reproduces


def raw_path(dataset: str, *parts: str) -> Path:
    """A file or folder of the shared raw copy of ``dataset``; missing, the test skips."""
    path = data_dir().joinpath(*parts)
    if not path.exists():
        raise DatasetUnavailable(dataset, f"{path} not found")
    return path


def predicted_logits(name: str, raw_items: list, batch_size: int = 500) -> torch.Tensor:
    """The tag's model over raw items through ``hub.transforms(name)``, ``batch_size`` at a time: (N, classes)."""
    model, prepare = hub.load(name), hub.transforms(name)
    with torch.no_grad():
        return torch.cat([model(torch.stack([prepare(item) for item in raw_items[start:start + batch_size]]))
                          for start in range(0, len(raw_items), batch_size)])


@pytest.mark.parametrize("name", ["mlp.adult", "tabm.adult", "tab_transformer.adult", "tabr.adult"])
def test_raw_adult_test_file_reproduces_the_card(name):
    from tabular.data import ADULT_COLUMNS

    path = data_dir() / "adult" / "adult.test"
    if not path.is_file():
        raise DatasetUnavailable("adult", f"{path} not found")
    # as adult.names documents the file: no header, '?' for unknown, labels written '>50K.' in the test file
    rows = pd.read_csv(path, header=None, names=ADULT_COLUMNS, skiprows=1, skipinitialspace=True, na_values=["?"])
    card, model, prepare = hub.model_card(name), hub.load(name), hub.transforms(name)
    with torch.no_grad():
        proba = torch.softmax(model(**prepare(rows.drop(columns="income"))), -1)[..., 1].numpy()
    proba = proba.mean(1) if proba.ndim == 2 else proba  # TabM: the mean over its k members' probabilities
    truth = (rows["income"].str.rstrip(".") == ">50K").to_numpy()
    assert_reproduces(card, "test/auroc", roc_auc_score(truth, proba))
    assert_reproduces(card, "test/acc", accuracy_score(truth, proba > 0.5))


@pytest.fixture(scope="module")
def cifar10_test_images() -> dict[str, list]:
    """The JPEG files of CIFAR-10's test split (see its PROVENANCE.md), per class folder, as PIL images."""
    from PIL import Image

    def opened(path: Path):
        with Image.open(path) as image:
            image.load()
            return image

    root = raw_path("cifar10", "cifar10", "test")
    return {folder.name: [opened(f) for f in sorted(folder.glob("*.jpg"))] for folder in root.iterdir()
            if folder.is_dir()}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["vit_micro_patch4_32.cifar10", "coat_lite_micro_32.cifar10_20k",
                                  "halonet_micro_32.cifar10", "resnet_cbam_micro_32.cifar10",
                                  "airbench_cbam_32.cifar10", "airbench_halo_32.cifar10", "cct_4_3x2_32.cifar10",
                                  "coat_lite_micro_32.cifar10"])
def test_raw_cifar10_test_images_reproduce_the_card(name, cifar10_test_images):
    card = hub.model_card(name)
    images = [image for label in card.label_names for image in cifar10_test_images[label]]
    labels = np.repeat(np.arange(len(card.label_names)), [len(cifar10_test_images[c]) for c in card.label_names])
    assert len(images) == 10_000
    assert_reproduces(card, "test/acc", accuracy_score(labels, predicted_logits(name, images).argmax(1)))


@pytest.mark.parametrize("name", ["vit_micro_patch4_32.breastmnist", "coat_lite_micro_32.breastmnist",
                                  "resnet_cbam_micro_32.breastmnist"])
def test_raw_breastmnist_test_images_reproduce_the_card(name):
    arrays = np.load(raw_path("breastmnist", "medmnist", "breastmnist.npz"))
    images, labels = arrays["test_images"], arrays["test_labels"].reshape(-1)  # (156, 28, 28) uint8, official split
    proba = torch.softmax(predicted_logits(name, list(images)), -1)[:, 1].numpy()
    card = hub.model_card(name)
    assert_reproduces(card, "test/acc", accuracy_score(labels, proba > 0.5))
    assert_reproduces(card, "test/auroc", roc_auc_score(labels, proba))


def fsdd_test_recordings(card) -> tuple[list, np.ndarray]:
    """The card's test split of FSDD, its held-out speaker's WAV files (digit_speaker_index.wav), read with
    soundfile as ``(waveform, sample_rate)`` pairs, and their digits."""
    import soundfile

    files = sorted(raw_path("fsdd", "fsdd", "recordings").glob(f"*_{card.data['args']['test_speaker']}_*.wav"))
    return [soundfile.read(f) for f in files], np.array([int(f.name.split("_")[0]) for f in files])


@pytest.mark.parametrize("name", ["ast_tiny.fsdd", "ssast_tiny.fsdd", "ssast_tiny.fsdd_full",
                                  "timbre_attention.fsdd"])
def test_raw_fsdd_recordings_reproduce_the_card(name):
    card = hub.model_card(name)
    recordings, digits = fsdd_test_recordings(card)
    assert len(recordings) == card.data["sizes"][2]
    assert_reproduces(card, "test/acc", accuracy_score(digits, predicted_logits(name, recordings).argmax(1)))


def test_raw_fsdd_recordings_reproduce_the_masked_patch_pick_accuracy_of_ssast_pretraining():
    """The pretext metric masks random patches (drawn from the global RNG after training), so the card holds one
    draw: it must lie within 3 standard deviations of the accuracy over seeded draws of the masks."""
    name = "ssast_tiny.fsdd_ssl"
    card, model, prepare = hub.model_card(name), hub.load(name), hub.transforms(name)
    x = torch.stack([prepare(recording) for recording in fsdd_test_recordings(card)[0]])  # (500, F, T)
    draws = []
    for seed in range(8):
        torch.manual_seed(seed)
        with torch.no_grad():
            scores = model.masked_patch_losses(x)[2]  # (B, M, M): the diagonal is each masked patch's own
        draws.append(float((scores.argmax(-1) == torch.arange(scores.shape[-1])).float().mean()))
    card_draw = card.metrics["test/acc"]["values"][0]
    assert abs(card_draw - np.mean(draws)) <= 3 * np.std(draws), f"card {card_draw:.4f}, draws {np.round(draws, 4)}"


@pytest.fixture(scope="module")
def planetoid_root(tmp_path_factory) -> Path:
    """A root for PyG's ``Planetoid(root, name)``: the shared ind.* files copied into ``<name>/raw`` (PyG writes a
    ``processed`` folder next to them, and the shared copy is read-only)."""
    shared, root = raw_path("planetoid", "planetoid"), tmp_path_factory.mktemp("planetoid")
    for name in ("Cora", "CiteSeer"):
        (root / name / "raw").mkdir(parents=True)
        for file in shared.glob(f"ind.{name.lower()}.*"):
            shutil.copy(file, root / name / "raw")
    return root


@pytest.mark.parametrize("name", ["gat.cora", "gat.citeseer", "cat.cora", "cat.citeseer"])
def test_pygs_planetoid_graph_reproduces_the_card(name, planetoid_root):
    from torch_geometric.datasets import Planetoid

    card, model, prepare = hub.model_card(name), hub.load(name), hub.transforms(name)
    graph = Planetoid(str(planetoid_root), card.data["dataset"])[0]  # as it loads: raw bag-of-words counts
    with torch.no_grad():
        predicted = model(**prepare(graph)).argmax(1)
    test = graph.test_mask  # the Planetoid public split, the card's
    assert_reproduces(card, "test/acc", float((predicted[test] == graph.y[test]).float().mean()))


def _raw_file(folder: str, file: str):
    path = data_dir() / folder / file
    if not path.is_file():
        raise DatasetUnavailable(folder, f"{path} not found")
    return path


def test_raw_cmapss_test_engines_reproduce_the_rul_card():
    import numpy as np

    name = "rul_attention.fd001"
    card, model, prepare = hub.model_card(name), hub.load(name), hub.transforms(name)
    # as the C-MAPSS readme documents the files: whitespace-separated, no header, 26 columns
    columns = ["unit", "cycle", "setting1", "setting2", "setting3", *(f"s{i}" for i in range(1, 22))]
    rows = pd.read_csv(_raw_file("cmapss", "test_FD001.txt"), sep=r"\s+", header=None, names=columns)
    true_rul = np.loadtxt(_raw_file("cmapss", "RUL_FD001.txt"))  # after each test engine's last cycle, by unit
    with torch.no_grad():
        rul = model(torch.stack([prepare(engine) for _, engine in rows.groupby("unit")]))[:, 0].numpy()
    # the card's test split: the last window of each official test engine, its true RUL capped as in training
    capped = np.minimum(true_rul, card.data["args"]["test_rul_cap"])
    assert_reproduces(card, "test/rmse", float(np.sqrt(np.mean((rul - capped) ** 2))))


def test_raw_los_loop_speeds_reproduce_the_testam_card():
    import numpy as np

    from timeseries.tasks import MaskedForecastError

    name = "testam.los_loop"
    card, model, prepare = hub.model_card(name), hub.load(name), hub.transforms(name)
    speeds = pd.read_csv(_raw_file("los_loop", "los_speed.csv"))  # a header of sensor ids, one row per 5 minutes
    # Los-loop holds no timestamps: its rows are consecutive five-minute steps, the first at midnight
    speeds.index = pd.date_range("2012-03-01", periods=len(speeds), freq="5min")
    args = card.data["args"]
    steps_in, steps_out = args["input_steps"], args["output_steps"]
    # the card's chronological split: the last test_fraction of the samples (steps_in in, steps_out out)
    starts = np.arange(len(speeds) - steps_in - steps_out + 1)
    test = starts[len(starts) - round(len(starts) * args["test_fraction"]):]
    mae = MaskedForecastError("mae")
    with torch.no_grad():
        for batch in np.array_split(test, 4):
            forecast = model(torch.stack([prepare(speeds.iloc[s:s + steps_in]) for s in batch]))  # (B, T_out, N)
            truth = np.stack([speeds.iloc[s + steps_in:s + steps_in + steps_out].to_numpy() for s in batch])
            mae.update(forecast, torch.from_numpy(truth).float())
    assert_reproduces(card, "test/mae", float(mae.compute()))


def test_raw_metabric_rows_reproduce_the_survival_fusion_card():
    import h5py

    from medical.survival_metrics import harrell_c

    name = "survival_fusion.metabric"
    card, model, prepare = hub.model_card(name), hub.load(name), hub.transforms(name)
    # the DeepSurv file's published test split: x (n, 9) as PROVENANCE.md documents it (4 genes, then 5 clinical)
    with h5py.File(_raw_file("deepsurv", "metabric_IHC4_clinical_train_test.h5"), "r") as f:
        x, time, event = (f["test"][key][:] for key in ("x", "t", "e"))
    with torch.no_grad():
        risk = model(**prepare(x)).numpy()
    assert_reproduces(card, "test/cindex", harrell_c(time, event, risk))
    named = pd.DataFrame(x, columns=card.input_spec["genes"] + card.input_spec["clinical"])
    assert all(torch.equal(a, b) for a, b in zip(prepare(named).values(), prepare(x).values()))


def test_raw_physionet_records_reproduce_the_tfcam_card():
    import numpy as np
    from torch.utils.data import default_collate

    from hub.data import stratified_split

    name = "tfcam.physionet2012"
    card, model, prepare = hub.model_card(name), hub.load(name), hub.transforms(name)
    outcomes = pd.read_csv(_raw_file("physionet2012", "Outcomes-a.txt"), dtype={"RecordID": str})
    outcomes = outcomes.sort_values("RecordID").reset_index(drop=True)
    died = outcomes["In-hospital_death"].to_numpy()
    # the card's split: fold `fold` of 5 folds stratified by outcome (seed 2012) over the records in id order
    test = stratified_split(died, (0.2,) * 5, seed=2012)[card.data["args"]["fold"]]
    records = [data_dir() / "physionet2012" / "set-a" / f"{outcomes['RecordID'][i]}.txt" for i in test]
    with torch.no_grad():
        proba = torch.softmax(model(**default_collate([prepare(r) for r in records])), -1)[:, 1].numpy()
    assert len(records) == card.data["sizes"][2] and np.isfinite(proba).all()
    assert_reproduces(card, "test/auroc", roc_auc_score(died[test], proba))


@pytest.mark.slow
def test_generated_scenes_as_image_arrays_reproduce_the_slot_autoencoder_card():
    """The shapes scenes are generated (``vision.shapes``): their raw form is the image as a file holds it, 8-bit
    RGB; the card's test split is its generated test scenes, scored in its batches with the slots' initial noise
    seeded per batch (:class:`vision.tasks.ObjectDiscoveryTask`)."""
    from vision.shapes import MultiShapes
    from vision.tasks import ForegroundARI

    name = "slot_autoencoder_micro_64.shapes"
    card, model, prepare = hub.model_card(name), hub.load(name), hub.transforms(name)
    args = card.data["args"]
    scenes, ari = MultiShapes(args["test_size"], "test"), ForegroundARI()
    for start in range(0, len(scenes), args["batch_size"]):
        batch = [scenes[i] for i in range(start, min(start + args["batch_size"], len(scenes)))]
        # (3, H, W) in [-1, 1] -> (H, W, 3) uint8, the scene as an image file holds it
        images = [np.round((image.permute(1, 2, 0).numpy() + 1) * 127.5).astype(np.uint8) for image, _ in batch]
        with torch.no_grad():
            out = model.autoencode(torch.stack([prepare(image) for image in images]),
                                   generator=torch.Generator().manual_seed(0))
        ari.update(out["masks"].argmax(1), torch.stack([mask for _, mask in batch]))
    assert_reproduces(card, "test/fg_ari", float(ari.compute()))
