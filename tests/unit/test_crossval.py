"""The cross-validated choice of a run's predictor on small data (issue 68, hub/crossval.py): folds, out-of-fold
outputs, the choice on them, and the refit of a graph baseline on every labelled node. Nothing trains a network."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from hub.crossval import cv_entry, fold_indices, format_cv, out_of_fold
from hub.errors import HubError
from hub.predictor import choose


def members(n: int = 200, seed: int = 0):
    """Labels and two members' probabilities: the model sure and right on 70% of the items, sure and wrong on the
    rest; the baseline leaning the right way (0.8) on 90% and the wrong way (0.8) on the rest: the baseline is the
    better predictor over all the items."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, n)
    model_right, baseline_right = rng.random(n) < 0.7, rng.random(n) < 0.9

    def proba(right, sure):
        p = np.where(right, sure, 1 - sure)  # the probability of the true class
        out = np.empty((n, 2))
        out[np.arange(n), labels] = p
        out[np.arange(n), 1 - labels] = 1 - p
        return out

    return labels, proba(model_right, 0.97), proba(baseline_right, 0.8), model_right, baseline_right


def test_out_of_fold_choice_is_right_where_a_single_split_picks_wrong():
    labels, model, baseline, model_right, baseline_right = members()
    # a validation split of 20 items on which the model happens to be right every time and the baseline not
    lucky = np.flatnonzero(model_right & ~baseline_right)[:4].tolist() + np.flatnonzero(model_right)[:16].tolist()
    single = choose("classification", labels[lucky], model[lucky], baseline[lucky])
    assert single.chosen == "model"  # the single split picks wrong
    folds = fold_indices("classification", labels, k=5, seed=0)
    entry = cv_entry("classification", labels, folds, model, {"lr": baseline, "worse": 1 - baseline})
    assert entry["chosen"] in ("baseline", "blend") and entry["baseline_name"] == "lr"
    assert entry["weight"] < 0.5  # mostly the baseline
    assert entry["cv"]["chosen"]["mean"] < entry["cv"]["model"]["mean"]  # a log loss: lower is better
    assert entry["folds"] == 5 and entry["items"] == 200 and entry["metric"] == "cv/nll"
    line = format_cv(entry, {"test/acc": 0.8})
    assert "chosen by 5-fold cross-validation on 200 labelled items" in line and "held-out test split" in line
    assert "± " in line and "refitted on every labelled item" in line


def test_out_of_fold_predicts_each_item_from_the_fit_that_did_not_see_it():
    labels = np.arange(30) % 3
    folds = fold_indices("classification", labels, k=3, seed=1)
    seen = []

    def fit_predict(train, val):
        assert not set(train) & set(val)
        seen.append(len(train))
        return np.stack([val, np.full(len(val), len(train))], 1)  # each item's own index: the order is kept

    out = out_of_fold(fit_predict, folds)
    assert out[:, 0].tolist() == list(range(30)) and seen == [20, 20, 20]
    assert sorted(i for _, val in folds for i in val) == list(range(30))


def test_folds_are_stratified_grouped_and_name_a_rare_class():
    labels = np.array([0] * 20 + [1] * 20 + [2])  # class 'rare' has one item
    said = []
    folds = fold_indices("classification", labels, k=5, seed=0, label_names=["a", "b", "rare"], warn=said.append)
    assert len(folds) == 5 and said and "'rare' (1 labelled item)" in said[0] and "stays in training" in said[0]
    for train, val in folds:
        assert np.bincount(labels[val], minlength=3)[:2].tolist() == [4, 4]  # stratified
    assert sum(40 in train for train, _ in folds) == 4  # the one item trains in every fold but its own
    groups = np.repeat(np.arange(8), 5)  # 8 units of 5 items
    grouped = fold_indices("regression", np.arange(40.0), groups, k=4, seed=0)
    for train, val in grouped:
        assert not set(groups[train]) & set(groups[val])  # no unit on both sides
    survival = np.stack([np.arange(40.0), np.arange(40) % 4 == 0], 1)
    for train, val in fold_indices("survival", survival, k=5, seed=0):
        assert survival[val, 1].sum() == 2  # the events spread evenly
    said.clear()
    assert len(fold_indices("regression", np.arange(10.0), np.arange(10) // 5, k=5, warn=said.append)) == 2
    assert "2 groups, fewer than the 5 folds" in said[0]
    with pytest.raises(HubError, match="at least 2 folds"):
        fold_indices("classification", labels, k=1)


def test_graph_baselines_out_of_fold_and_the_refit_on_every_labelled_node():
    """The three graph baselines out of fold; the refit learns from every labelled node, a class seen only in the
    test split included, and a one-item class trains."""
    from torch_geometric.data import Data

    from graph.baselines import BASELINES, baseline_probabilities, cv_baselines, refit_baseline, scaled_features

    generator = torch.Generator().manual_seed(0)
    y = torch.cat([torch.arange(90) % 3, torch.tensor([3])])  # class 3: one node
    x = torch.nn.functional.one_hot(y, 4).float() * 3 + torch.randn(91, 4, generator=generator)
    edges = torch.stack([torch.arange(91), (torch.arange(91) + 3) % 91])
    test = torch.zeros(91, dtype=torch.bool)
    test[torch.arange(0, 90, 10)] = True
    y = y.clone()
    y[80] = 3  # a second node of class 3, in the test split only... and the first, node 90, outside it
    test[80] = True
    graph = Data(x=x, edge_index=torch.cat([edges, edges.flip(0)], 1), y=y, test_mask=test)
    pool = torch.nonzero(~test).view(-1).numpy()
    folds = fold_indices("classification", y[pool].numpy(), k=3, seed=0, warn=lambda line: None)
    outputs, values = cv_baselines(graph, pool, folds)
    assert set(outputs) == {b.name for b in BASELINES}
    for out in outputs.values():
        assert out.shape == (len(pool), 4) and np.allclose(out.sum(1), 1)
    assert (outputs["logistic regression on node features"].argmax(1) == y[pool].numpy()).mean() > 0.9
    every = torch.nonzero(y >= 0).view(-1).numpy()
    for name in outputs:
        before = refit_baseline(name, graph, pool, values[name])
        after = refit_baseline(name, graph, every, values[name])
        assert before["classes"].tolist() == [0, 1, 2, 3] == after["classes"].tolist()  # the one-item class trains
        features = scaled_features(graph)[0]
        moved = baseline_probabilities(after, features)[80, 3] - baseline_probabilities(before, features)[80, 3]
        assert moved > 0  # the test node's label was learnt from


def test_survival_baselines_fit_and_a_kept_forest_predicts_only_from_its_checked_file(tmp_path):
    """The random survival forest of a survival table's choice by folds is kept as a skops file whose sha256 the
    (checked) arrays carry; a changed file is refused."""
    from hub.core.weights import sha256_bytes
    from hub.predictor import save_skops
    from medical.baselines import RSF_FILE, SURVIVAL_BASELINES, fit_survival_baseline, kept_survival_risk
    from medical.survival_metrics import harrell_c

    rng = np.random.default_rng(0)
    x = rng.standard_normal((120, 3))
    time = np.exp(-x[:, 0] + 0.3 * rng.standard_normal(120)) * 10
    event = (rng.random(120) < 0.7).astype(float)
    for name in SURVIVAL_BASELINES:
        fitted = fit_survival_baseline(name, x[:80], time[:80], event[:80])
        assert harrell_c(time[80:], event[80:], fitted.predict(x[80:])) > 0.7
    forest = save_skops(fitted, tmp_path / RSF_FILE)
    arrays = {"forest_sha256": np.frombuffer(bytes.fromhex(sha256_bytes(forest.read_bytes())), np.uint8)}
    inputs = {"clinical": torch.as_tensor(x[80:], dtype=torch.float32)}
    np.testing.assert_allclose(kept_survival_risk(arrays, tmp_path, inputs),
                               fitted.predict(x[80:].astype(np.float32).astype(np.float64)))
    forest.write_bytes(forest.read_bytes() + b"\0")
    with pytest.raises(HubError, match="sha256"):
        kept_survival_risk(arrays, tmp_path, inputs)


def test_the_guard_answers_flagged_rows_with_the_member_robust_on_the_near_shift(monkeypatch):
    """Issue 68: held-out near-shift evidence picks the member for the rows flagged out of distribution; predict's
    mix gives those rows that member's outputs and the predictor column names who answered each row."""
    from dataclasses import dataclass

    from hub.deploy import predict
    from hub.kinds import InputKind
    from hub.predictor import guard_entry

    labels = np.linspace(0, 100, 50)
    shift = {"labels": labels, "model": labels + 40.0, "baseline": labels + 5.0, "how": "perturbed sensors"}
    guard = guard_entry("regression", shift, 1.0)  # the model was chosen; on the shift it is 40 cycles off
    assert guard["member"] == "baseline" and guard["weight"] == 0.0 and guard["how"] == "perturbed sensors"
    assert guard["shift"]["chosen"] == pytest.approx(40.0) and guard["shift"]["guard"] == pytest.approx(5.0)
    robust = {**shift, "model": labels + 1.0}
    assert guard_entry("regression", robust, 1.0) is None  # the chosen model is the better there: no guard
    assert guard_entry("regression", {**shift, "baseline": labels + 90.0}, 0.0) is None  # the baseline chose: none

    class Kind(InputKind):
        name = "fake"

        def baseline_outputs(self, card, path):
            return np.full((3, 1), -1.0)

    @dataclass
    class Card:  # the fields of a model card that predict's mix reads
        name: str
        predictor: dict

    card = Card("fake-run", {"chosen": "model", "weight": 1.0, "guard": guard})
    monkeypatch.setattr(predict, "kind_of", lambda card: Kind())
    mix = predict.predictor_mix(card, ["a.csv"])
    values = torch.tensor([[10.0], [20.0], [30.0]])
    out = mix(values, [False, True, False])
    assert out.view(-1).tolist() == [10.0, -1.0, 30.0]
    assert predict.row_predictors(card, [False, True, False], 3) == ["model", "baseline (guard: ood)", "model"]
    card.predictor = {"chosen": "model", "weight": 1.0}
    assert predict.row_predictors(card, [True], 1) is None  # no guard: every row is the chosen predictor's


def test_a_table_keeps_a_one_row_class_in_training_and_its_folds_and_refit_cover_the_rows(tmp_path, caplog):
    """Issue 68 on tables: a class of one row trains (a WARNING names it); a fold run validates on one fold of the
    rows outside the test split; the refit trains on every row, test included."""
    import pandas as pd

    from tabular.data import tabular_csv
    from tests.unit.test_tabular import _frame

    frame = _frame(60)
    frame.loc[59, "y"] = "maybe"  # a class of one row
    frame.to_csv(tmp_path / "t.csv", index=False)
    with caplog.at_level("WARNING"):
        data = tabular_csv(str(tmp_path / "t.csv"), "y")
        data.setup()
    assert "class(es) {'maybe': 1} have fewer than the 3 rows" in caplog.text and "stay in training" in caplog.text
    assert "maybe" in data.label_names and "maybe" in set(data.frames["train"]["y"])
    sizes = [len(data.frames[s]) for s in ("train", "val", "test")]
    assert sum(sizes) == 60
    validated = []
    for index in range(3):
        fold = tabular_csv(str(tmp_path / "t.csv"), "y", cv_fold=[3, index, 0])
        fold.setup()
        assert len(fold.frames["train"]) + len(fold.frames["val"]) == sizes[0] + sizes[1]
        assert fold.frames["test"].equals(data.frames["test"])
        validated.append(fold.frames["val"])
    pool = pd.concat([data.frames["train"], data.frames["val"]])
    assert sorted(pd.concat(validated)["age"].fillna(-1)) == sorted(pool["age"].fillna(-1))  # each row once
    refit = tabular_csv(str(tmp_path / "t.csv"), "y", refit=True)
    refit.setup()
    assert len(refit.frames["train"]) == 60 and len(refit.train_set) == 60


def test_a_folders_rare_class_trains_and_its_folds_and_refit_cover_the_items(tmp_path, caplog):
    """Issue 68 on folders of class folders (images, clips): a class of one item stays in training with a WARNING
    naming it; fold runs validate each item outside the test split once; the refit trains on every item."""
    from pathlib import Path

    from hub.data import class_folder_splits, folded_splits

    def scan(folder: Path) -> dict[str, list[Path]]:
        return {c: [folder / c / f"{i}.png" for i in range(n)] for c, n in (("a", 10), ("b", 10), ("solo", 1))}

    with caplog.at_level("WARNING"):
        splits, classes = class_folder_splits(tmp_path, scan, 0.2, 0.2, split_seed=0)
    assert classes == ["a", "b", "solo"]
    assert "class(es) 'solo' (1) have fewer than the 3 items" in caplog.text and "stay in training" in caplog.text
    assert [label for _, label in splits["train"]].count(2) == 1
    assert sum(len(v) for v in splits.values()) == 21
    pool = splits["train"] + splits["val"]
    validated = []
    for index in range(3):
        fold, said = folded_splits(splits, [3, index, 0])
        assert sorted(fold["train"] + fold["val"]) == sorted(pool) and fold["test"] == splits["test"]
        assert said == f"fold {index} of 3 (seed 0) of the items outside the test split"
        validated += fold["val"]
    assert sorted(validated) == sorted(pool)  # each item validated once
    refit, said = folded_splits(splits, refit=True)
    assert sorted(refit["train"]) == sorted(pool + splits["test"]) and "refit" in said
    assert folded_splits(splits) == (splits, "the folder's train/val/test split")


def test_a_tables_groups_stay_whole_in_every_split_and_fold_and_name_no_feature(tmp_path):
    """Issue 68, grouped folds: with ``groups`` (``attnhub finetune --groups COLUMN``) no patient's rows are split
    between train, validation and test, nor between the folds of the cross-validated choice (the data module's
    fold runs and the baselines' folds, from the same pooled groups); the column is no feature. Without it the
    rows are split independently, and patients then straddle the splits (the leak this prevents)."""
    from tabular.data import tabular_csv
    from tests.unit.test_tabular import _frame

    frame = _frame(120)
    frame["patient"] = [f"p{i // 4}" for i in range(120)]  # 30 patients of 4 rows
    frame.to_csv(tmp_path / "t.csv", index=False)

    loose = tabular_csv(str(tmp_path / "t.csv"), "y")
    loose.setup()
    assert set(loose.frames["train"]["patient"]) & set(loose.frames["test"]["patient"])  # a leak without groups
    data = tabular_csv(str(tmp_path / "t.csv"), "y", groups="patient")
    data.setup()
    assert "patient" not in data.preprocessor.numeric + data.preprocessor.categorical
    assert "grouped by 'patient'" in data.info["split"]
    rows = {split: len(data.frames[split]) for split in ("train", "val", "test")}
    assert sum(rows.values()) == 120 and all(n % 4 == 0 for n in rows.values())  # whole patients only
    pool_groups = data.pool_groups
    assert len(pool_groups) == rows["train"] + rows["val"]
    folds = fold_indices("classification", data.pool_labels, pool_groups, k=3, seed=0)
    for fit, held in folds:
        assert not set(pool_groups[fit]) & set(pool_groups[held])
    for index in range(3):
        fold = tabular_csv(str(tmp_path / "t.csv"), "y", cv_fold=[3, index, 0], groups="patient")
        fold.setup()
        assert len(fold.frames["val"]) == len(folds[index][1])  # the same folds as the baselines'
    with pytest.raises(Exception, match="groups column 'ward'"):
        tabular_csv(str(tmp_path / "t.csv"), "y", groups="ward").setup()


def test_the_baseline_verdict_quotes_the_figure_it_compared():
    """The comparison printed after a refit by folds quotes the held-out run's figure it was decided on, not the
    refit's in-sample one (before: 'at least as good: acc 0.4667 against 0.5000')."""
    from hub.finetune import format_comparison

    entry = {"name": "HistGradientBoosting", "test": {"test/acc": 0.5}, "metric": "test/acc", "model": 0.5333,
             "model_is_better": True}
    assert "test/acc 0.5333 against 0.5000" in format_comparison("run", entry)


def test_a_folders_groups_read_from_file_names_stay_whole_in_splits_and_folds(tmp_path):
    """``--groups REGEX`` on a folder of class folders (FSDD's speakers: ``3_jackson_12.wav``): no speaker's clips
    straddle train/val/test or two folds; a file whose name the pattern misses is named in the error."""
    from pathlib import Path

    from hub.data import class_folder_splits, file_groups, folded_splits
    from hub.errors import DataError

    speakers = [f"s{i}" for i in range(8)]

    def scan(folder: Path) -> dict[str, list[Path]]:
        return {c: [folder / c / f"{c}_{s}_{i}.wav" for s in speakers for i in range(3)] for c in ("0", "1")}

    pattern = r"^\d+_([a-z0-9]+)_"
    splits, _ = class_folder_splits(tmp_path, scan, 0.25, 0.25, split_seed=0, groups=pattern)
    who = {s: set(file_groups([f for f, _ in items], pattern)) for s, items in splits.items()}
    assert not who["train"] & who["val"] and not who["train"] & who["test"] and not who["val"] & who["test"]
    assert sum(len(v) for v in splits.values()) == 48
    for index in range(3):
        fold, said = folded_splits(splits, [3, index, 0], groups=pattern)
        fit, held = (set(file_groups([f for f, _ in fold[s]], pattern)) for s in ("train", "val"))
        assert fit and held and not fit & held and said.endswith(f"grouped by the file names' '{pattern}'")
    with pytest.raises(DataError, match="readme.wav: its name does not match the groups pattern"):
        file_groups([Path("readme.wav")], pattern)
    with pytest.raises(DataError, match="is not a regular expression"):
        file_groups([Path("a.wav")], "(")
