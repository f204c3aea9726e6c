"""Medical survival models: shapes, gradients, overfit, Cox losses by hand, missing modalities, user tables,
the shipped survival_fusion.metabric weight and the risk-group plot (the fine-tune runs:
tests/integration/test_medical_runs.py)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import hub
import hub.kinds
from hub.errors import DataError, HubError
from medical.tasks import SurvivalTask, cox_loss, pairwise_order_loss, weighted_cox_loss

TILES = dict(image_backbone="test_efficientnet", num_image_tokens=2, dim=16, num_heads=2)


def _batch(b=6, genes=4, clinical=5, tiles=3):
    torch.manual_seed(0)
    return dict(clinical=torch.randn(b, clinical), genes=torch.randn(b, genes),
                gene_mask=torch.ones(b, genes, dtype=torch.bool), tiles=torch.randn(b, tiles, 3, 32, 32),
                tiles_mask=torch.ones(b, tiles, dtype=torch.bool))


@pytest.mark.parametrize("family,args,keys", [
    ("survival_fusion", TILES, ("clinical", "genes", "gene_mask", "tiles", "tiles_mask")),
    ("survival_fusion", dict(dim=16, num_heads=2), ("clinical", "genes", "gene_mask")),
    ("survival_fusion", dict(num_genes=0, dim=16, num_heads=2), ("clinical",)),
    ("survival_fusion", dict(dim=16, num_heads=2, clinical_embedding="periodic"), ("clinical", "genes", "gene_mask")),
    ("deepsurv_mlp", dict(num_genes=4), ("clinical", "genes", "gene_mask")),
    ("biofusionnet", dict(dim=16, num_heads=2), ("clinical", "genes", "gene_mask")),
    ("biofusionnet", TILES, ("clinical", "genes", "gene_mask", "tiles", "tiles_mask")),
])
def test_forward_shape_and_every_parameter_gets_a_gradient(family, args, keys):
    model = hub.create_model(family, **args)
    inputs = {k: v for k, v in _batch().items() if k in keys}
    risk = model(**inputs)
    assert risk.shape == (6,) and torch.isfinite(risk).all()
    assert model.forward_features(**inputs).shape == (6, model.num_features)
    risk.pow(2).sum().backward()
    assert [n for n, p in model.named_parameters() if p.grad is None] == []


def test_missing_modality_is_finite():
    model = hub.create_model("survival_fusion", **TILES).eval()
    batch = _batch()
    batch["gene_mask"][0] = False  # patient 0 has no genes
    batch["tiles_mask"][1] = False  # patient 1 has no tiles
    batch["gene_mask"][2], batch["tiles_mask"][2] = False, False  # patient 2 has neither: clinical only
    assert torch.isfinite(model(**batch)).all()
    assert torch.isfinite(model(batch["clinical"])).all()  # the whole batch without genes and images
    no_genes = hub.create_model("survival_fusion", dim=16, num_heads=2).eval()
    assert torch.isfinite(no_genes(batch["clinical"], gene_mask=torch.zeros(6, 4, dtype=torch.bool),
                                   genes=batch["genes"])).all()


@pytest.mark.parametrize("clinical_embedding", ["linear", "periodic"])
def test_tiny_overfit(clinical_embedding):
    torch.manual_seed(0)
    model = hub.create_model("survival_fusion", dim=16, num_heads=2, dropout=0.0, clinical_embedding=clinical_embedding)
    batch = _batch(b=8)
    del batch["tiles"], batch["tiles_mask"]
    time, event = torch.arange(1.0, 9.0), torch.ones(8)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    first = None
    for _ in range(150):
        loss = cox_loss(model(**batch), time, event)
        first = first if first is not None else loss.item()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    # the minimum of the Cox loss on 8 distinct times with all events: risk ordering is perfect, loss -> 0
    assert loss.item() < 0.1 * first


def test_unknown_clinical_embedding_is_named():
    with pytest.raises(HubError, match="clinical_embedding must be 'linear' or 'periodic', got 'fourier'"):
        hub.create_model("survival_fusion", clinical_embedding="fourier")


def test_cox_losses_match_hand_computed_values_with_ties():
    h = torch.tensor([0.5, 0.0, -0.5, 0.2])
    time, event = torch.tensor([1.0, 1.0, 2.0, 3.0]), torch.tensor([1, 1, 1, 0])
    r = [math.exp(v) for v in h.tolist()]
    s = sum(r)
    # t=1: two tied events, risk set {0,1,2,3}; t=2: one event, risk set {2,3}; 3 events in all
    breslow = -((0.5 + 0.0 - 2 * math.log(s)) + (-0.5 - math.log(r[2] + r[3]))) / 3
    efron = -((0.5 + 0.0 - math.log(s) - math.log(s - 0.5 * (r[0] + r[1]))) + (-0.5 - math.log(r[2] + r[3]))) / 3
    assert cox_loss(h, time, event, ties="breslow").item() == pytest.approx(breslow, rel=1e-5)
    assert cox_loss(h, time, event, ties="efron").item() == pytest.approx(efron, rel=1e-5)
    assert weighted_cox_loss(h, time, event, torch.ones(4)).item() == pytest.approx(breslow, rel=1e-5)
    # balanced weights: events 3/4 of the batch -> weight 4/6, the censored one 4/2
    w = [4 / 6, 4 / 6, 4 / 6, 2.0]
    ws = sum(wi * ri for wi, ri in zip(w, r))
    weighted = -(w[0] * (0.5 - math.log(ws)) + w[1] * (0.0 - math.log(ws))
                 + w[2] * (-0.5 - math.log(w[2] * r[2] + w[3] * r[3]))) / (3 * 4 / 6)
    assert weighted_cox_loss(h, time, event).item() == pytest.approx(weighted, rel=1e-5)
    assert cox_loss(h, time, torch.zeros(4)).item() == 0.0  # no event: empty partial likelihood


def test_pairwise_order_loss_matches_a_loop_over_comparable_pairs():
    h = torch.tensor([0.5, 0.0, -0.5, 0.2, 1.0], requires_grad=True)
    time, event = torch.tensor([1.0, 1.0, 2.0, 3.0, 0.5]), torch.tensor([1, 1, 0, 1, 0])
    # comparable (i, j): i an event and t_i < t_j; tied times and censored i do not count
    pairs = [(i, j) for i in range(5) for j in range(5) if event[i] and time[i] < time[j]]
    assert sorted(pairs) == [(0, 2), (0, 3), (1, 2), (1, 3)]
    naive = sum(-math.log(1 / (1 + math.exp(-(h[i].item() - h[j].item())))) for i, j in pairs) / len(pairs)
    loss = pairwise_order_loss(h, time, event)
    assert loss.item() == pytest.approx(naive, rel=1e-6)
    loss.backward()
    assert h.grad[4] == 0 and h.grad[0] < 0 and h.grad[3] > 0  # the early event pushed up, the later one down
    assert pairwise_order_loss(h, time, torch.zeros(5)).item() == 0.0  # no event: no pair
    task = SurvivalTask(rank_weight=2.0)
    batch = ({"clinical": torch.zeros(5, 1)}, torch.stack([time, event.float()], 1))
    loss_with_rank, _, _ = task.step(lambda clinical: h.detach()[:, None], batch, "train")
    assert loss_with_rank.item() == pytest.approx(cox_loss(h.detach(), time, event).item() + 2 * naive, rel=1e-5)
    with pytest.raises(DataError, match="rank_weight must be >= 0"):
        SurvivalTask(rank_weight=-1.0)


def _table(tmp_path, rows, header="T,E,g1,g2,age"):
    path = tmp_path / "my.csv"
    path.write_text(header + "\n" + "\n".join(rows) + "\n")
    return str(path)


GOOD = [f"{10 + i},{i % 2},{i * 0.1},{1 - i * 0.05},{40 + i}" for i in range(30)]


@pytest.mark.parametrize("rows,args,message", [
    (GOOD[:-1] + ["-3,1,0.1,0.2,50"], {}, "negative times"),
    (GOOD[:-1] + [",1,0.1,0.2,50"], {}, "missing, infinite or non-numeric"),
    (GOOD[:-1] + ["12,2,0.1,0.2,50"], {}, "must hold 0 (censored) or 1"),
    ([r.split(",")[0] + ",0," + ",".join(r.split(",")[2:]) for r in GOOD], {}, "has no events"),
    (GOOD, {"gene_cols": ["g1", "g9"]}, "missing columns"),
    (GOOD, {"time_col": "time"}, "time column (data.args.time_col): ['time']"),
    (GOOD, {"expect_num_genes": 4}, "the model takes 4 gene columns"),
])
def test_bad_survival_tables_name_the_column(tmp_path, rows, args, message):
    from medical.survival_data import survival_csv

    args = {"time_col": "T", "event_col": "E", "gene_cols": ["g1", "g2"], **args}
    with pytest.raises(DataError) as err:
        survival_csv(_table(tmp_path, rows), **args).setup()
    assert message in str(err.value)


def test_survival_table_masks_missing_genes(tmp_path):
    from medical.survival_data import survival_csv

    rows = GOOD[:-1] + ["50,1,,0.3,60"]
    data = survival_csv(_table(tmp_path, rows), time_col="T", event_col="E", gene_cols=["g1", "g2"])
    data.setup()
    masks = torch.stack([data.train_set[i][0]["gene_mask"] for i in range(len(data.train_set))]
                        + [data.val_set[i][0]["gene_mask"] for i in range(len(data.val_set))]
                        + [data.test_set[i][0]["gene_mask"] for i in range(len(data.test_set))])
    assert (~masks).sum() == 1 and data.model_args() == {"num_genes": 2, "num_clinical": 1}


def _user_survival_table(path, n=240, seed=0):
    """A survival table as a user holds it: an id, a numeric and a categorical covariate (a few cells empty), the
    time and event under names of its own; the risk grows with age and stage."""
    import pandas as pd

    generator = np.random.default_rng(seed)
    age = generator.normal(60, 10, n)
    stage = generator.choice(["I", "II", "III"], n).astype(object)
    stage[:4] = None
    risk = 0.15 * (age - 60) + np.select([stage == "II", stage == "III"], [1.5, 3.0], 0.0)
    onset, censoring = generator.exponential(50 * np.exp(-risk)), generator.exponential(80, n)
    pd.DataFrame({"id": [f"p{i}" for i in range(n)], "age": age.round(1), "stage": stage,
                  "week": np.minimum(onset, censoring).round(2), "arrest": (onset < censoring).astype(int)}
                 ).to_csv(path, index=False)
    return str(path)


def test_coxph_baseline_ranks_patients_of_a_strong_proportional_hazards_signal(tmp_path):
    from medical.baselines import coxph_baseline
    from medical.survival_data import survival_csv

    data = survival_csv(_user_survival_table(tmp_path / "t.csv", n=600), time_col="week", event_col="arrest")
    data.setup()
    result = coxph_baseline(data)
    assert result.metrics["test/cindex"] > 0.75 and result.metrics["test/uno_c"] > 0.7
    assert len(result.predictions["risk"]) == len(data.test_set) == 120


def test_survival_tables_refused_before_training_name_what_to_do(tmp_path, capsys):
    """A tag on a table without its genes names the from-scratch command; a bare family needs --time and --event."""
    from hub.cli import main

    table = _user_survival_table(tmp_path / "t.csv")
    assert main(["finetune", "survival_fusion.metabric", "--data", table, "--time", "week", "--event", "arrest"]) == 2
    err = capsys.readouterr().err
    assert "lacks the gene columns ['MKI67', 'EGFR', 'PGR', 'ERBB2']" in err
    assert f"attnhub finetune survival_fusion --data {table} --time week --event arrest" in err
    assert main(["finetune", "deepsurv_mlp", "--data", table, "--time", "week"]) == 2
    assert "needs --time COLUMN (follow-up time) and --event COLUMN" in capsys.readouterr().err


def test_risk_group_plot_and_metrics(tmp_path):
    from medical.survival_metrics import risk_group_plot, survival_metrics

    rng = np.random.default_rng(0)
    risk = rng.normal(size=200)
    time = rng.exponential(np.exp(-risk))
    event = rng.random(200) < 0.7
    p = risk_group_plot(time, event, risk, tmp_path / "risk_groups.png")
    assert (tmp_path / "risk_groups.png").stat().st_size > 1000 and p < 0.01
    metrics = survival_metrics(time[:100], event[:100], risk[:100], time[100:], event[100:], risk[100:])
    assert metrics["harrell_c"] > 0.6 and metrics["uno_c"] > 0.6 and 0 < metrics["ibs"] < 0.25


def test_harrell_c_interval_covers_the_estimate_and_narrows_with_more_patients():
    from medical.survival_metrics import harrell_c, harrell_c_interval

    rng = np.random.default_rng(0)
    risk = rng.normal(size=400)
    time, event = rng.exponential(np.exp(-risk)), rng.random(400) < 0.7
    small, large = slice(0, 100), slice(0, 400)
    low, high = harrell_c_interval(time[small], event[small], risk[small], num_resamples=300)
    assert low < harrell_c(time[small], event[small], risk[small]) < high
    assert (low, high) == harrell_c_interval(time[small], event[small], risk[small], num_resamples=300)
    low_l, high_l = harrell_c_interval(time[large], event[large], risk[large], num_resamples=300)
    assert 0.35 < (high_l - low_l) / (high - low) < 0.7  # the width shrinks about as 1 / sqrt(N)
    with pytest.raises(ValueError, match="at least 2 events"):
        harrell_c_interval(time[:10], np.zeros(10), risk[:10])


def test_calibrated_survival_undoes_an_over_spread_risk_scale():
    from medical.survival_metrics import calibrated_survival, evaluation_times, survival_metrics

    rng = np.random.default_rng(0)
    risk = rng.normal(size=600)  # the true log hazard ratio
    time, event = rng.exponential(np.exp(-risk)), rng.random(600) < 0.8
    fit, held, test = slice(0, 200), slice(200, 400), slice(400, 600)
    times = evaluation_times(time[fit], time[test])
    # a Cox model on the risk score is the same model whatever the score's scale: the slope absorbs it
    plain = calibrated_survival(time[held], event[held], risk[held], risk[test], times)
    spread = calibrated_survival(time[held], event[held], 5 * risk[held], 5 * risk[test], times)
    assert spread.shape == (200, len(times)) and np.allclose(plain, spread, atol=1e-4)
    # risks five times too wide: Breslow on them gives overconfident curves, the held-out part corrects them
    args = (time[fit], event[fit], 5 * risk[fit], time[test], event[test], 5 * risk[test])
    overconfident = survival_metrics(*args)["ibs"]
    calibrated = survival_metrics(*args, calibration=(time[held], event[held], 5 * risk[held]))["ibs"]
    assert calibrated < overconfident - 0.02


def _stays(b=8, t=12, f=5, s=3):
    generator = torch.Generator().manual_seed(0)
    return (torch.randn(b, t, f, generator=generator), torch.rand(b, t, f, generator=generator) < 0.3,
            torch.randn(b, s, generator=generator))


@pytest.mark.parametrize("family,args", [("tfcam", dict(hours=12, dim=16, num_heads=2, dropout=0.0)),
                                         ("tfcam", dict(hours=12, dim=16, num_heads=2, dropout=0.0, summaries=True)),
                                         ("tfcam", dict(hours=12, dim=16, num_heads=2, dropout=0.0, summaries=True,
                                                        summary_dim=8, k=4)),
                                         ("icu_gru", dict(hidden=16, dropout=0.0))])
def test_icu_models_shapes_gradients_overfit_and_bad_input(family, args):
    from hub.tasks import create_task
    from hub.testing import assert_overfits, params_without_grad

    torch.manual_seed(0)
    model = hub.create_model(family, num_variables=5, num_static=3, **args)
    values, mask, static = _stays()
    step = create_task("classification", num_classes=2).step  # handles (B, k, C) member logits
    batch = ({"values": values, "mask": mask, "static": static}, torch.arange(8) % 2)
    step(model.train(), batch, "train")[0].backward()
    assert params_without_grad(model) == []
    logits = model.eval()(values, mask, static)
    assert logits.shape == (8, 2) and torch.isfinite(logits).all()
    features = model.forward_features(values, mask, static)
    assert features.shape[0] == 8 and features.shape[-1] == model.num_features
    model.train()
    assert_overfits(model, lambda: step(model, batch, "train")[0], steps=150, lr=5e-3)
    model.reset_classifier(3)
    assert model.eval()(values, mask, static).shape == (8, 3)
    with pytest.raises(DataError, match=r"expected values and mask of shape \(batch, hours, 5\)"):
        model(values[..., :4], mask[..., :4], static)
    bad = values.clone()
    bad[0, 0, 0] = float("nan")
    with pytest.raises(DataError, match="NaN or inf"):
        model(bad, mask, static)


def test_tfcam_members_predict_their_mean_probability():
    torch.manual_seed(0)
    model = hub.create_model("tfcam", num_variables=5, num_static=3, hours=12, dropout=0.0, summaries=True, k=4)
    values, mask, static = _stays()
    members = model.train()(values, mask, static)  # (B, k, C)
    assert members.shape == (8, 4, 2) and members.std(1).min() > 0  # the members differ
    expected = members.softmax(-1).mean(1)
    torch.testing.assert_close(model.eval()(values, mask, static).softmax(-1), expected)


def test_stay_summaries_match_a_loop_over_observed_hours():
    from medical.models.tfcam import stay_summaries

    values, mask, _ = _stays()
    mask[0, :, 1] = False  # a variable never observed
    filled = values.clone()
    for t in range(1, values.shape[1]):  # carry forward, as the data does
        filled[:, t] = torch.where(mask[:, t], values[:, t], filled[:, t - 1])
    got = stay_summaries(filled, mask).view(8, 5, 5)
    for b in range(8):
        for f in range(5):
            seen = filled[b, mask[b, :, f], f]
            last = seen[-1] if len(seen) else filled[b, -1, f]
            stats = [seen.mean(), seen.min(), seen.max()] if len(seen) else [torch.tensor(0.0)] * 3
            expected = torch.stack([last, *stats, torch.tensor(len(seen), dtype=torch.float).log1p()])
            torch.testing.assert_close(got[b, :, f], expected)


def test_tfcam_explanations_are_distributions_and_are_drawn(tmp_path):
    model = hub.create_model("tfcam", num_variables=5, num_static=3, hours=12).eval()
    values, mask, static = _stays()
    explained = model.explain(values, mask, static)
    torch.testing.assert_close(explained["critical_hours"].sum(1), torch.ones(8))
    torch.testing.assert_close(explained["feature_ranking"].sum(1), torch.ones(8))
    # each hour's between-variable attention rows sum to 1, weighted by hours that sum to 1
    torch.testing.assert_close(explained["feature_influence"].sum(1), torch.ones(5))
    assert explained["feature_influence"].shape == (5, 5)
    from medical.explain import plot_tfcam_explanations

    path = plot_tfcam_explanations(explained, list("abcde"), tmp_path / "tfcam.png", top=3)
    assert path.stat().st_size > 10_000


def test_physionet_record_parsing_forward_fill_and_summaries():
    from medical.icu_data import HOURS, VARIABLES, _grid_sums, _observations, _record_rows, prepare, summary_features

    text = ("Time,Parameter,Value\n00:00,RecordID,1\n00:00,Age,70\n00:00,Gender,1\n00:00,Height,-1\n"
            "00:00,ICUType,2\n00:00,Weight,80\n00:00,HR,90\n00:30,HR,100\n02:10,HR,80\n03:00,Weight,81\n"
            "48:00,GCS,15\n01:00,pH,-1\n")
    sums, counts, descriptors = _grid_sums(_observations(_record_rows(text)), VARIABLES, HOURS)
    hr, weight, gcs = VARIABLES.index("HR"), VARIABLES.index("Weight"), VARIABLES.index("GCS")
    assert descriptors == {"Age": 70.0, "Gender": 1.0, "Height": -1.0, "ICUType": 2.0, "Weight": 80.0}
    assert sums[0, hr] == 190 and counts[0, hr] == 2 and counts[2, hr] == 1  # hour 0 averages 2 readings
    assert counts[3, weight] == 1 and counts[0, weight] == 0  # the 00:00 Weight is the descriptor
    assert counts[HOURS - 1, gcs] == 1 and counts.sum() == 5  # 48:00 in the last hour; pH -1 dropped
    means = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)[None].repeat(3, 0).astype(np.float32)
    means[1:, 0, hr] = [60, 120]
    static_raw = np.array([[70, 1, np.nan, 80, 2], [50, 0, 170, 70, 4], [60, 1, 160, 90, 1]], dtype=np.float32)
    arrays, stats = prepare(means, static_raw, np.arange(3))
    z = arrays["values"][0, :, hr]
    assert z[1] == z[0] and z[3] == z[2] and z[0] != z[2]  # carried forward between observations
    assert arrays["mask"][0, 0, hr] and not arrays["mask"][0, 1, hr]
    assert arrays["static"].shape == (3, 9) and np.isfinite(arrays["static"]).all()
    table = summary_features(means, static_raw)
    assert table.shape == (3, 5 * len(VARIABLES) + 5)
    assert table[0, hr] == 80 and table[0, 4 * len(VARIABLES) + hr] == 2  # last value, hours observed


def _icu_folder(root, n=60, variables=("HR", "MAP", "Lactate"), seed=0):
    """``n`` tiny PhysioNet 2012 style records in ``root`` and ``Outcomes-a.txt``: the label is whether the stay's
    lactate runs high (learnable from the grid and from the summaries)."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    outcomes = ["RecordID,SAPS-I,In-hospital_death"]
    for i in range(n):
        record, died = 140000 + i, i % 3 == 0
        rows = ["Time,Parameter,Value", f"00:00,RecordID,{record}", f"00:00,Age,{rng.integers(20, 90)}",
                "00:00,Gender,1", "00:00,Height,-1", f"00:00,ICUType,{1 + i % 4}", "00:00,Weight,80"]
        for hour in sorted(rng.choice(48, size=6, replace=False)):
            for k, name in enumerate(variables):
                level = (4.0 if died else 1.5) if k == 2 else 80 + 10 * k
                rows.append(f"{hour:02d}:{rng.integers(60):02d},{name},{level + rng.normal(0, 0.5):.2f}")
        (root / f"{record}.txt").write_text("\n".join(rows) + "\n")
        outcomes.append(f"{record},{rng.integers(5, 20)},{int(died)}")
    (root / "Outcomes-a.txt").write_text("\n".join(outcomes) + "\n")
    return root


@pytest.mark.parametrize("change,args,message", [
    (lambda root: (root / "Outcomes-a.txt").unlink(), {}, "no outcomes file"),
    (lambda root: None, {"outcomes": "outcomes-b.txt"}, "the outcomes file 'outcomes-b.txt'"),
    (lambda root: None, {"label": "died"}, r"has no column 'died' \(the label"),
    (lambda root: (root / "140005.txt").write_text("time;param;value\n00:00;HR;80\n"), {},
     "140005.txt: the first line is 'time;param;value'; expected a PhysioNet 2012 record"),
    (lambda root: (root / "140005.txt").write_text("Time,Parameter,Value\n00:10,HR\n"), {},
     "line 2 is '00:10,HR', not Time"),
    (lambda root: (root / "140005.txt").write_text("Time,Parameter,Value\n00:10,HR,inf\n"), {},
     r"140005.txt: line 2 is '00:10,HR,inf', not Time \(HH:MM\),Parameter,Value \(a finite number\)"),
    (lambda root: (root / "Outcomes-a.txt").write_text((root / "Outcomes-a.txt").read_text().replace(",1\n", ",2\n")),
     {}, r"label column 'In-hospital_death' must be binary, 0 or 1 for every stay .* found \['2'\]"),
    (lambda root: (root / "Outcomes-a.txt").write_text("RecordID,In-hospital_death\n140000,0\n"), {},
     r"no outcome for 39 stay\(s\)"),
])
def test_bad_icu_folders_are_refused_naming_what_was_expected(tmp_path, change, args, message):
    from medical.icu_data import icu_stays_folder

    root = _icu_folder(tmp_path / "stays", n=40)
    change(root)
    with pytest.raises(DataError, match=message):
        icu_stays_folder(str(root), **args).setup()


def test_icu_folder_split_from_subfolders_and_from_a_long_table(tmp_path):
    """train/ and test/ subfolders give the split (val: 1/8 of train/); ``stays.csv`` holds the same stays."""
    import shutil

    from medical.icu_data import icu_stays_folder

    flat = _icu_folder(tmp_path / "flat", n=48)
    split = tmp_path / "split"
    for part in ("train", "test"):
        (split / part).mkdir(parents=True)
    for i, path in enumerate(sorted(flat.glob("14*.txt"))):
        shutil.copy(path, split / ("test" if i % 4 == 0 else "train") / path.name)
    shutil.copy(flat / "Outcomes-a.txt", split / "Outcomes-a.txt")
    data = icu_stays_folder(str(split))
    data.setup()
    assert data.info["sizes"] == [31, 5, 12]
    assert set(data.grids["ids"][data.split_index["test"]]) == {str(140000 + i) for i in range(0, 48, 4)}
    table = tmp_path / "table"
    table.mkdir()
    lines = ["RecordID,Time,Parameter,Value"] + [f"{path.stem},{row}" for path in sorted(flat.glob("14*.txt"))
                                                 for row in path.read_text().splitlines()[1:]]
    (table / "stays.csv").write_text("\n".join(lines) + "\n")
    shutil.copy(flat / "Outcomes-a.txt", table / "outcomes.csv")
    from_table, from_files = icu_stays_folder(str(table)), icu_stays_folder(str(flat))
    from_table.setup()
    from_files.setup()
    np.testing.assert_array_equal(from_table.grids["means"], from_files.grids["means"])
    np.testing.assert_array_equal(from_table.train_set.values, from_files.train_set.values)


def test_icu_records_predict_in_batches_named_by_their_paths(tmp_path):
    """``attnhub predict tfcam.physionet2012 RECORDS``: each record file read by the card's transform, the stays
    batched as the model's keyword inputs and named by their paths; a file that is not a record is refused, named."""
    from torch.utils.data import default_collate

    root = _icu_folder(tmp_path / "stays", n=3)
    records = [str(p) for p in sorted(root.glob("14*.txt"))]
    model = hub.load("tfcam.physionet2012").eval()
    card = model.pretrained_cfg
    with torch.inference_mode():
        batches = list(hub.kinds.predict_logits(card, model, records, 2))
        expected = model(**default_collate([hub.transforms("tfcam.physionet2012")(r) for r in records]))
    assert [names for names, _ in batches] == [records[:2], records[2:]]
    torch.testing.assert_close(torch.cat([logits for _, logits in batches]), expected)
    assert not torch.allclose(expected[0], expected[1])  # the stays differ
    with pytest.raises(DataError, match="Outcomes-a.txt: the first line is 'RecordID,SAPS-I,In-hospital_death'"):
        list(hub.kinds.predict_logits(card, model, [records[0], str(root / "Outcomes-a.txt")], 2))


def test_icu_logistic_regression_gives_predictor_data_and_loads_through_its_allow_list(tmp_path):
    """With the run's model, the ICU baseline gives both members' validation and test probabilities; its pipeline is
    kept as skops and loaded back only with its one extra trusted type."""
    from hub.core.weights import sha256_bytes
    from hub.predictor import load_skops
    from medical.baselines import ICU_TRUSTED_TYPES, logistic_regression_baseline, stay_features
    from medical.icu_data import icu_stays_folder

    data = icu_stays_folder(str(_icu_folder(tmp_path / "stays")))
    data.setup()
    torch.manual_seed(0)
    model = hub.create_model("tfcam", **data.model_args(), dim=16, num_heads=2)
    result = logistic_regression_baseline(data, model=model)
    kept = result.predictor
    assert kept.task == "classification" and kept.model["val"].shape == kept.baseline["val"].shape == (6, 2)
    np.testing.assert_allclose(kept.model["test"].sum(1), 1.0)
    np.testing.assert_array_equal(kept.labels["test"], data.test_set.y.numpy())
    np.testing.assert_allclose(kept.baseline["test"][:, 1], result.predictions["proba_died"])
    path = kept.save(tmp_path)
    assert path.name == "baseline.skops"
    pipeline = load_skops(path, sha256_bytes(path.read_bytes()), ICU_TRUSTED_TYPES)
    test = data.split_index["test"]
    features = stay_features(data.grids["means"][test], data.grids["static_raw"][test], data.input_spec)
    np.testing.assert_allclose(pipeline.predict_proba(features), kept.baseline["test"])
    with pytest.raises(HubError, match=r"outside the allow-list of its input kind: \['numpy.dtype'\]"):
        load_skops(path, sha256_bytes(path.read_bytes()), ())


def _naive_cross_attention(layer, x, context):
    """:class:`hub.attention.CrossAttention` written out: x + out_proj(softmax(q kᵀ / √d) v) per head, then its MLP."""
    attn = layer.attn
    heads, width = attn.num_heads, attn.dim_attn // attn.num_heads
    q, c = layer.norm_query(x), layer.norm_context(context)

    def split(t):
        return t.view(t.shape[0], t.shape[1], heads, width).transpose(1, 2)

    q, k, v = split(attn.q_proj(q)), split(attn.k_proj(c)), split(attn.v_proj(c))
    weights = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(width), dim=-1)
    x = x + attn.out_proj((weights @ v).transpose(1, 2).reshape(x.shape[0], x.shape[1], heads * width))
    return x + layer.mlp(x), weights


def test_biofusionnet_co_dual_cross_attention_matches_a_naive_reference():
    """Co-attention (A <- B, B <- A), then dual cross-attention of the co-attended sides, pooled: in float64."""
    model = hub.create_model("biofusionnet", num_genes=6, num_clinical=4, dim=16, num_heads=2, dropout=0.0)
    model = model.double().eval()
    clinical, genes = torch.randn(3, 4, dtype=torch.float64), torch.randn(3, 6, dtype=torch.float64)
    a, b = model.genes(genes), model.clinical_tokens(clinical)  # (3, 6, 16), (3, 4, 16)
    fusion = model.fusion
    a1, w_ab = _naive_cross_attention(fusion.co_a_to_b, a, b)
    b1, _ = _naive_cross_attention(fusion.co_b_to_a, b, a)
    a2, _ = _naive_cross_attention(fusion.dual_a_to_b, a1, b1)
    b2, w_dual_ba = _naive_cross_attention(fusion.dual_b_to_a, b1, a1)
    features, maps = model.forward_features(clinical, genes, need_weights=True)
    assert torch.allclose(features[:, :16], a2.mean(1), atol=1e-10)
    assert torch.allclose(features[:, 16:32], b2.mean(1), atol=1e-10)
    assert torch.allclose(maps["co_a_to_b"], w_ab, atol=1e-10) and maps["co_a_to_b"].shape == (3, 2, 6, 4)
    assert torch.allclose(maps["dual_b_to_a"], w_dual_ba, atol=1e-10)


def test_biofusionnet_tiny_overfit_on_the_weighted_cox_loss():
    from hub.testing import assert_overfits

    torch.manual_seed(0)
    model = hub.create_model("biofusionnet", dim=16, num_heads=2, dropout=0.0)
    batch = _batch(b=8)
    del batch["tiles"], batch["tiles_mask"]
    time, event = torch.arange(1.0, 9.0), torch.tensor([1.0, 1, 0, 1, 0, 1, 1, 0])
    # perfect ordering drives every event's term to its lowest: the loss falls well below its start
    assert_overfits(model, lambda: weighted_cox_loss(model(**batch), time, event), steps=150, lr=1e-2, ratio=0.2)


def test_biofusionnet_refuses_missing_modalities_by_name():
    with pytest.raises(DataError, match="needs genes and clinical"):
        hub.create_model("biofusionnet", num_genes=0)
    model = hub.create_model("biofusionnet", dim=16, num_heads=2)
    with pytest.raises(DataError, match="needs genes of shape"):
        model(torch.randn(2, 5))
    with pytest.raises(DataError, match="no image branch"):
        model(**_batch(b=2))
    with pytest.raises(DataError, match="give tiles"):
        hub.create_model("biofusionnet", **TILES)(torch.randn(2, 5), genes=torch.randn(2, 4))


def test_gse7390_folds_cover_every_patient_once_per_repeat_and_the_card_spec():
    from hub.core.registry import get_dataset_entry
    from medical.survival_data import gse7390_folds, gse7390_table

    x, time, event, genes, clinical = gse7390_table()  # shipped by scikit-survival
    assert x.shape == (198, 83) and len(genes) == 76 and clinical[:3] == ["age", "size", "er"]
    folds = gse7390_folds(event)
    assert len(folds) == 15
    for repeat in range(3):
        tests = np.concatenate([folds[5 * repeat + f][1] for f in range(5)])
        assert sorted(tests.tolist()) == list(range(198))
    data = get_dataset_entry("gse7390").builder(fold=7)
    data.setup()
    assert sum(data.info["sizes"]) == 198 and data.info["sizes"][2] == len(folds[7][1])
    assert data.input_spec["kind"] == "survival_table" and data.task_args()["loss"] == "weighted"
    with pytest.raises(DataError, match="fold must be in 0..14"):
        get_dataset_entry("gse7390").builder(fold=15)
