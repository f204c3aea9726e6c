"""Open-set recognition on CIFAR-10: the near shift of the field's protocol, with the plain baselines beside the
hub's ``ood_score``. Writes ``benchmarks/results/open_set.md``.

The protocol (Neal et al., "Open Set Learning with Counterfactual Images", ECCV 2018; Vaze et al., "Open-Set
Recognition: a Good Closed-Set Classifier is All You Need", ICLR 2022): a classifier trained on 6 of CIFAR-10's
classes meets images of the other 4 at test time, and a score should rank them above the known classes' test
images. Here the 4 unknown classes are split in two: 2 *validation unknowns* (their training images), on which a
score may be chosen, and 2 *test unknowns* (their test images), on which the chosen score is only measured, as the
issue asks ("choose on held-out classes, keep the report's shifts for testing only"). Each split is a seeded
permutation of the classes (:func:`class_split`); the model is the headline CPU recipe
(``recipes/vision/airbench_cbam_cifar10.yaml``) on the known classes' 30,000 training images, shortened to
``--epochs``.

Scores, all from one forward pass of the same model: the hub's ``ood_score`` (as ``attnhub predict`` flags inputs)
and each of its components alone ("component: ..."), and as an ablation the ``ood_score`` with its silent score
set to 0 ("ood_score, grey_energy silenced": what ranking CIFAR-10's own grey photos as a kind shift costs the near
shift, and gives up on the far shift of grey scans); the maximum softmax probability (MSP, Hendrycks & Gimpel 2017),
the max logit and the energy (Liu et al. 2020) of the logits; KNN, the distance to the 50th nearest
normalised penultimate feature of the training images (Sun et al. 2022); Mahalanobis to the nearest class mean (Lee
et al. 2018). The detector is fitted again on the run's data by :func:`hub.uncertainty.ood.fit_detector` (the rule
training applies today); "held-out-class proxy" is the AUROC its class-dependent score is chosen by
(:func:`hub.uncertainty.ood.choose_class_score`), to be compared with the real validation unknowns. Far shifts for the
same scores: uniform noise, and BreastMNIST's grey ultrasound scans given as a user would (32x32x3, CIFAR-10's
normalisation). Each score's flag threshold is its own validation 99% quantile (the hub's ``ood_score``: the card's
threshold), so every row flags about 1% of known-class validation images.

    HUB_DATA_DIR=../shared/data python -m benchmarks.open_set [--splits 0 1 2] [--epochs 8] [--runs RUN ...]

``--runs`` reuses finished run folders (one per split, in ``--splits`` order) instead of training.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch
from sklearn.metrics import roc_auc_score

from benchmarks import RESULTS
from hub.core.cards import read_card
from hub.io import atomic_write_bytes
from hub.models import load_run, model_card
from hub.recipe import card_data
from hub.uncertainty import ood
from vision.data import CIFAR_CLASSES, cifar10

RECIPE = "recipes/vision/airbench_cbam_cifar10.yaml"
KNOWN, VALIDATION_UNKNOWN = 6, 2  # of the 10 classes; the remaining 2 are the test unknowns
UNKNOWN_ITEMS = 2000  # validation-unknown training images scored (the test unknowns: all 2,000 of their test images)
FAR_ITEMS = 300
RATE = ood.DEFAULT_FALSE_ALARM_RATE
FAR_SETS = ("uniform noise", "BreastMNIST scans")


def class_split(seed: int) -> tuple[list[str], list[str], list[str]]:
    """``(known, validation_unknown, test_unknown)`` class names: a permutation of CIFAR-10's classes by ``seed``."""
    order = [CIFAR_CLASSES[i] for i in np.random.default_rng(seed).permutation(len(CIFAR_CLASSES))]
    return order[:KNOWN], order[KNOWN:KNOWN + VALIDATION_UNKNOWN], order[KNOWN + VALIDATION_UNKNOWN:]


def train_split(seed: int, epochs: int, output_dir: str) -> Path:
    """Train the recipe on split ``seed``'s known classes for ``epochs`` (warm-up scaled as the recipe's 3.2 of 14)."""
    from hub.run.train import train

    known, _, _ = class_split(seed)
    overrides = [f"data.args.classes=[{', '.join(known)}]", f"trainer.max_epochs={epochs}",
                 f"scheduler.warmup_epochs={round(3.2 * epochs / 14, 2)}", f"trainer.check_val_every_n_epoch={epochs}",
                 f"seed={seed}", f"output_dir={output_dir}", "name=airbench_cbam_cifar10_open_set"]
    return train(RECIPE, overrides, progress=False)


def _batches(images, limit: int | None = None):
    """``(x, y)`` batches of resident ``images`` (a ResidentImages), its first ``limit`` items."""
    if limit is not None and len(images) > limit:
        images = images.subset(torch.randperm(len(images), generator=torch.Generator().manual_seed(0))[:limit])
    return images.batches(500)


def score_table(model, detector: ood.Detector, images, bank: torch.Tensor, statistics: dict[str, torch.Tensor],
                spec: dict) -> dict[str, np.ndarray]:
    """Every score of ``images`` (an iterable of ``(x, y)`` batches), from one pass: name -> (N,) (higher: more
    unusual; the detector's components raw, not yet over their scales). ``bank``: the training images' penultimate
    features (KNN); ``statistics``: their class means and shared precision (Mahalanobis)."""
    out = ood.split_outputs(model, images, [*detector.scores, "mahalanobis"], spec)
    components = out.components(detector)
    scores = {"ood_score": detector.score(components)}
    for name in set(detector.scores) & ood.SILENT_SCORES:  # the ablation: what the silent score costs a near shift
        silenced = components.copy()
        silenced[:, detector.scores.index(name)] = 0.0
        scores[f"ood_score, {name} silenced"] = detector.score(silenced)
    scores.update({f"component: {name}": components[:, i] for i, name in enumerate(detector.scores)})
    scores["Mahalanobis"] = ood.mahalanobis(out.features, **statistics).numpy()
    scores["MSP"] = ood.max_softmax_score(out.logits).numpy()
    scores["max logit"] = ood.max_logit_score(out.logits).numpy()
    scores["energy"] = ood.energy(out.logits).numpy()
    scores["KNN"] = ood.knn_score(out.features, bank).numpy()
    scores["accuracy"] = (out.logits.argmax(-1) == out.labels).float().numpy()
    return scores


def held_out_class_proxy(model, validation, scored: dict[str, np.ndarray], statistics: dict[str, torch.Tensor],
                         spec: dict) -> dict[str, float]:
    """AUROC of :func:`hub.uncertainty.ood.held_out_class_scores` on the known classes' validation images (each as if
    its class were unknown) against the same scores with every class: the proxy a run could choose on without held-out
    classes, beside the real validation unknowns."""
    out = ood.split_outputs(model, validation, ["mahalanobis"], spec)
    held_out = ood.held_out_class_scores(out.logits, out.labels, out.features, **statistics)
    names = {"msp": "MSP", "max_logit": "max logit", "energy": "energy", "mahalanobis": "Mahalanobis"}
    return {names[k]: _auroc(scored[names[k]], v.numpy()) for k, v in held_out.items()}


def _auroc(inside: np.ndarray, outside: np.ndarray) -> float:
    labels = np.r_[np.zeros(len(inside)), np.ones(len(outside))]
    values = np.nan_to_num(np.r_[inside, outside].astype(np.float64), posinf=1e300)
    return float(roc_auc_score(labels, values))


def evaluate_split(run_dir: Path, seed: int, breast_scans: torch.Tensor) -> dict:
    """One split's table: per score, AUROC on the validation and test unknowns and the far shifts, flagged shares."""
    known, val_unknown, test_unknown = class_split(seed)
    card = read_card(run_dir / "card.json")
    model, spec = load_run(run_dir).eval(), card.input_spec
    data = cifar10(full_train=True, augment=False, classes=known, val_fraction=card.data["args"]["val_fraction"])
    data.setup()
    detector, section = ood.fit_detector(model, card, data)  # the current rule, as training fits it today
    every = cifar10(full_train=True, augment=False, val_fraction=0.01)  # all classes: the unknowns' images
    every.setup()
    names = every.label_names
    train = ood.split_outputs(model, _batches(data.train_set, ood.MAX_FIT_ITEMS), ["mahalanobis"], spec)
    statistics = ood.mahalanobis_statistics(train.features, train.labels)
    sets = {
        "validation": data.val_set.batches(500),
        "validation unknowns": _batches(every.train_set.of_classes([names.index(c) for c in val_unknown]),
                                        UNKNOWN_ITEMS),
        "test": data.test_set.batches(500),
        "test unknowns": every.test_set.of_classes([names.index(c) for c in test_unknown]).batches(500),
        "uniform noise": [(uniform_noise(FAR_ITEMS, spec), torch.zeros(FAR_ITEMS, dtype=torch.long))],
        "BreastMNIST scans": [(breast_scans, torch.zeros(len(breast_scans), dtype=torch.long))],
    }
    with torch.no_grad():
        scored = {name: score_table(model, detector, batches, train.features, statistics, spec)
                  for name, batches in sets.items()}
    rows = {}
    for score in [s for s in scored["test"] if s != "accuracy"]:
        threshold = detector.threshold if score == "ood_score" else np.quantile(scored["validation"][score], 1 - RATE)
        rows[score] = {
            "validation unknowns": _auroc(scored["validation"][score], scored["validation unknowns"][score]),
            "test unknowns": _auroc(scored["test"][score], scored["test unknowns"][score]),
            **{far: _auroc(scored["test"][score], scored[far][score]) for far in FAR_SETS},
            "test unknowns flagged": float((scored["test unknowns"][score] > threshold).mean()),
            "false alarms": float((scored["test"][score] > threshold).mean()),
        }
    proxy = held_out_class_proxy(model, sets["validation"], scored["validation"], statistics, spec)
    for score, value in proxy.items():
        rows[score]["held-out-class proxy"] = value
    chosen = max(rows, key=lambda s: rows[s]["validation unknowns"])
    return {"seed": seed, "ood_score": section["score"], "class_score": section.get("class_score"), "known": known,
            "validation unknowns": val_unknown, "test unknowns": test_unknown,
            "closed-set accuracy": float(scored["test"]["accuracy"].mean()), "rows": rows,
            "chosen on validation": chosen}


def uniform_noise(count: int, spec: dict) -> torch.Tensor:
    """(count, C, H, W) pixels uniform in [0, 1], normalised as ``spec`` says (seeded)."""
    mean, std = (torch.tensor(spec[k]).view(1, -1, 1, 1) for k in ("mean", "std"))
    pixels = torch.rand(count, spec["channels"], spec["height"], spec["width"],
                        generator=torch.Generator().manual_seed(0))
    return (pixels - mean) / std


def breastmnist_scans(limit: int = FAR_ITEMS) -> torch.Tensor:
    """BreastMNIST's test scans as a CIFAR-10 model takes them (32x32x3 with CIFAR-10's normalisation)."""
    breast = card_data(model_card("vit_micro_patch4_32.breastmnist"))
    return torch.cat([x for x, _ in breast.test_dataloader()])[:limit]


def report(splits: list[dict]) -> str:
    """The markdown report: per score, the mean and spread over splits of each column, then each split."""
    columns = ["held-out-class proxy", "validation unknowns", "test unknowns", "test unknowns flagged", "false alarms",
               *FAR_SETS]
    lines = ["# Open-set recognition on CIFAR-10", "", "Written by `python -m benchmarks.open_set` (see its docstring "
             "for the protocol). AUROC of each score for telling unknown-class images from the known classes' "
             "images; flagged: at the score's own validation 99% quantile (the hub's `ood_score`: the card's "
             "threshold). The model: `airbench_cbam_32` trained by the headline CPU recipe on the 6 known classes.",
             "", f"Splits: {len(splits)}; closed-set test accuracy "
             f"{np.mean([s['closed-set accuracy'] for s in splits]):.3f} "
             f"± {np.std([s['closed-set accuracy'] for s in splits]):.3f}.", "",
             "| score | " + " | ".join(columns) + " |", "|---|" + "---:|" * len(columns)]
    for score in splits[0]["rows"]:
        cells = []
        for column in columns:
            values = [s["rows"][score][column] for s in splits if column in s["rows"][score]]
            cells.append("—" if not values else f"{np.mean(values):.3f} ± {np.std(values):.3f}" if len(values) > 1
                         else f"{values[0]:.3f}")
        lines.append(f"| {score} | " + " | ".join(cells) + " |")
    ablations = [score for score in splits[0]["rows"] if score.startswith("ood_score, ")]
    lines += ["", "Per split (the score chosen on the validation unknowns, and its AUROC on the test unknowns against "
              "the best of MSP and energy there):", "",
              "| split | known | validation unknowns | test unknowns | closed-set acc | chosen | its test AUROC | "
              "best of MSP, energy | ood_score |" + "".join(f" {a} |" for a in ablations),
              "|---|---|---|---|---:|---|---:|---:|---:|" + "---:|" * len(ablations)]
    for s in splits:
        rows, chosen = s["rows"], s["chosen on validation"]
        best = max(rows["MSP"]["test unknowns"], rows["energy"]["test unknowns"])
        lines.append(f"| {s['seed']} | {', '.join(s['known'])} | {', '.join(s['validation unknowns'])} | "
                     f"{', '.join(s['test unknowns'])} | {s['closed-set accuracy']:.3f} | {chosen} | "
                     f"{rows[chosen]['test unknowns']:.3f} | {best:.3f} | {rows['ood_score']['test unknowns']:.3f} |"
                     + "".join(f" {rows[a]['test unknowns']:.3f} |" for a in ablations))
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--splits", type=int, nargs="+", default=[0, 1, 2], help="split seeds (class permutations)")
    parser.add_argument("--epochs", type=int, default=8, help="training epochs per split (the recipe has 14)")
    parser.add_argument("--runs", nargs="*", default=None, help="finished run folders, one per split, to reuse")
    parser.add_argument("--output-dir", default="runs", help="where new run folders go")
    args = parser.parse_args()
    if args.runs and len(args.runs) != len(args.splits):
        parser.error(f"--runs needs one run folder per split: {len(args.splits)} splits, {len(args.runs)} runs")
    runs = [Path(r) for r in args.runs] if args.runs else [train_split(s, args.epochs, args.output_dir)
                                                           for s in args.splits]
    scans = breastmnist_scans()
    splits = [evaluate_split(run, seed, scans) for run, seed in zip(runs, args.splits)]
    atomic_write_bytes(RESULTS / "open_set.json", json.dumps(splits, indent=1).encode())
    atomic_write_bytes(RESULTS / "open_set.md", report(splits).encode())
    print(report(splits))


if __name__ == "__main__":
    main()
