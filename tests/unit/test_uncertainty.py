"""Calibrated probabilities and conformal intervals (hub.uncertainty.conformal): the quantile's coverage and
finite-sample correction, temperature scaling of overconfident logits, and both fitted at the end of a run and used by
predict."""
import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score

import hub
from hub.errors import HubError
from hub.uncertainty.conformal import (
    conformal_half_width,
    fit_intervals,
    fit_temperature_figures,
    interval_columns,
    output_residuals,
    prediction_bin_edges,
    prediction_bins,
)


def test_half_width_is_the_corrected_order_statistic():
    residuals = np.arange(1.0, 11.0)[::-1]  # 10 points, unsorted
    assert conformal_half_width(residuals, 0.9) == 10.0  # ceil(11 * 0.9) = 10th smallest, not the 9th (n * 0.9)
    assert conformal_half_width(residuals, 0.8) == 9.0  # ceil(11 * 0.8) = 9
    assert conformal_half_width(np.arange(19.0), 0.95) == 18.0  # 19 points: the largest
    with pytest.raises(HubError, match="needs at least 19 calibration points, got 18"):
        conformal_half_width(np.arange(18.0), 0.95)


@pytest.mark.parametrize("n_calibration", [10, 500])
def test_ninety_percent_intervals_cover_ninety_percent_of_fresh_points(n_calibration):
    """Split conformal on Gaussian noise: over many draws of the calibration set, 90% intervals cover between 90%
    and 90% + 1/(n+1) of fresh points on average (the guarantee). With n = 10 the uncorrected quantile (the 9th of
    10) would cover 9/11 = 82% only."""
    rng = np.random.default_rng(0)
    coverage = []
    for _ in range(400):
        width = conformal_half_width(np.abs(rng.normal(0, 2.0, n_calibration)), 0.9)
        coverage.append(np.mean(np.abs(rng.normal(0, 2.0, 2000)) <= width))
    assert 0.87 <= np.mean(coverage) <= 0.93
    assert 0.895 <= np.mean(coverage) <= 0.9 + 1 / (n_calibration + 1) + 0.005


def test_intervals_are_per_output_and_leave_missing_targets_out():
    """Forecasts (N, horizons, sensors): half widths per horizon, from all sensors, without the 0 targets of
    missing readings; each horizon's noise scale shows in its widths (in every bin: the noise does not depend on
    the speed), and the test coverage is measured."""
    rng = np.random.default_rng(1)

    def draw(n):
        target = torch.from_numpy(rng.uniform(20, 70, (n, 3, 5)))
        noise = torch.from_numpy(rng.normal(0, 1, (n, 3, 5))) * torch.tensor([1.0, 2.0, 4.0])[:, None]
        forecast = target + noise
        target[:, :, 0] = 0.0  # sensor 0 never reads: its forecasts are far off and must not count
        return forecast, target

    val = output_residuals(*draw(2000), count=3, missing=0.0)
    test = output_residuals(*draw(2000), count=3, missing=0.0)
    assert [len(p) for p, _ in val] == [len(r) for _, r in val] == [2000 * 4] * 3
    entry = fit_intervals(val, test, ["speed_5min", "speed_10min", "speed_15min"], scale=10.0)
    widths = np.array(entry["half_width"]["0.9"])  # (outputs, bins)
    assert widths.shape == (3, 10) and entry["val_points_per_bin"][0] == [800] * 10
    np.testing.assert_allclose(widths / widths[:1], [[1] * 10, [2] * 10, [4] * 10], rtol=0.2)
    np.testing.assert_allclose(widths[0].mean(), 10 * 1.645, rtol=0.05)  # the 95th percentile of N(0, 1), in units
    assert all(0.88 <= c <= 0.92 for c in entry["test_coverage_per_output"]["0.9"])
    with_zeros = output_residuals(*draw(2000), count=3)  # without the mask the 0 targets inflate the width
    assert conformal_half_width(with_zeros[0][1], 0.9) > 5 * conformal_half_width(val[0][1], 0.9)


def test_bin_edges_split_equal_counts_and_keep_enough_points_per_bin():
    assert prediction_bin_edges(np.arange(399.0)).tolist() == []  # under 2 * 200 points: one bin
    np.testing.assert_allclose(prediction_bin_edges(np.arange(1000.0)), [199.8, 399.6, 599.4, 799.2])
    assert len(prediction_bin_edges(np.arange(10_000.0))) == 9  # at most 10 bins
    tied = np.r_[np.full(900, 500.0), np.arange(300.0)]  # predictions at a cap: 6 bins of 200 were asked for
    edges = prediction_bin_edges(tied)
    assert edges.tolist() == [pytest.approx(199.83, abs=0.01)]  # not 500: it would leave 100 points below it
    assert np.bincount(prediction_bins(tied, edges)).tolist() == [200, 1000]


def test_bins_of_the_prediction_cover_each_group_where_one_pooled_width_does_not():
    """Heteroscedastic noise, small below a prediction of 50 and four times larger above (as RUL errors grow with
    the RUL); the test points come mostly from the noisy group, the validation points mostly from the quiet one.
    One pooled half width, right on the validation mix, covers the noisy group far below 90%, and so the test
    split; the bins of the predicted value cover each group, and the test split, at about 90%."""
    rng = np.random.default_rng(2)

    def draw(quiet, noisy):
        prediction = np.r_[rng.uniform(0, 50, quiet), rng.uniform(50, 100, noisy)]
        residual = np.abs(rng.normal(0, 1, quiet + noisy)) * np.where(prediction < 50, 1.0, 4.0)
        return [(prediction, residual)]

    val, test = draw(3000, 1000), draw(500, 4500)
    pooled = conformal_half_width(val[0][1], 0.9)
    noisy = test[0][0] >= 50
    assert np.mean(test[0][1][noisy] <= pooled) < 0.8 and np.mean(test[0][1] <= pooled) < 0.83
    entry = fit_intervals(val, test, ["y"])
    widths = np.asarray(entry["half_width"]["0.9"][0])[np.searchsorted(entry["bin_edges"][0], test[0][0], "right")]
    for group in (noisy, ~noisy):
        assert 0.87 <= np.mean(test[0][1][group] <= widths[group]) <= 0.93
    assert 0.88 <= entry["test_coverage"]["0.9"] <= 0.92
    assert entry["test_mean_width"]["0.9"] == pytest.approx(2 * widths.mean())


def test_temperature_scaling_does_not_worsen_an_overconfident_classifier():
    rng = torch.Generator().manual_seed(0)
    true_logits = torch.randn(4000, 5, generator=rng) * 1.5
    labels = torch.multinomial(true_logits.softmax(1), 1, generator=rng).squeeze(1)
    overconfident = 3.0 * true_logits  # the right ranking, three times too sharp
    figures = fit_temperature_figures(overconfident[:2000], labels[:2000], overconfident[2000:], labels[2000:])
    assert figures["temperature"] == pytest.approx(3.0, rel=0.15)
    for split in ("val", "test"):
        assert figures[split]["ece_calibrated"] <= figures[split]["ece"]
        assert figures[split]["nll_calibrated"] < figures[split]["nll"]
    assert figures["val"]["ece"] > 0.2 and figures["val"]["ece_calibrated"] < figures["val"]["ece"] / 4


def test_interval_columns_sit_beside_each_output_at_a_stored_level():
    """Per item, the half width of its output's bin (edges 15 and 25 for output ``a``; one bin for ``b``); an older
    card's single half width per output is one bin."""
    card = dataclasses.replace(hub.model_card("rul_attention.fd001"), output_names=["a", "b"], calibration={
        "conformal": {"bin_edges": [[15.0, 25.0], []],
                      "half_width": {"0.8": [[1.0, 1.5, 2.5], [2.0]], "0.9": [[3.0, 3.5, 5.0], [4.0]]}}})
    values = torch.tensor([[10.0, 20.0], [20.0, 20.0], [25.0, 0.0]])  # a in bins 0, 1 and 2 (25 is the edge)
    header, columns = interval_columns(card, ["a", "b"], values)
    assert header == ["a", "a_lower_90", "a_upper_90", "b", "b_lower_90", "b_upper_90"]
    assert columns.tolist() == [[10.0, 7.0, 13.0, 20.0, 16.0, 24.0], [20.0, 16.5, 23.5, 20.0, 16.0, 24.0],
                                [25.0, 20.0, 30.0, 0.0, -4.0, 4.0]]
    assert interval_columns(card, ["a", "b"], values[:1], 0.8)[1].tolist() == [[10.0, 9.0, 11.0, 20.0, 18.0, 22.0]]
    with pytest.raises(HubError, match=r"levels \['0.8', '0.9'\], not 0.95"):
        interval_columns(card, ["a", "b"], torch.zeros(1, 2), 0.95)
    with pytest.raises(HubError, match="half widths for 2 outputs but the model gave 3"):
        interval_columns(card, ["a", "b", "c"], torch.zeros(1, 3))
    broken = dataclasses.replace(card, calibration={"conformal": {"bin_edges": [[15.0], []],
                                                                  "half_width": {"0.9": [[3.0, 3.5, 5.0], [4.0]]}}})
    with pytest.raises(HubError, match=r"\[3, 1\] interval half widths per output for \[1, 0\] bin edges"):
        interval_columns(broken, ["a", "b"], torch.zeros(1, 2))
    older = dataclasses.replace(card, calibration={"conformal": {"half_width": {"0.9": [3.0, 4.0]}}})
    assert interval_columns(older, ["a", "b"], values[:1])[1].tolist() == [[10.0, 7.0, 13.0, 20.0, 16.0, 24.0]]
    plain = dataclasses.replace(card, calibration={})
    assert interval_columns(plain, ["a", "b"], torch.zeros(1, 2))[0] == ["a", "b"]
    with pytest.raises(HubError, match="no prediction intervals"):
        interval_columns(plain, ["a", "b"], torch.zeros(1, 2), 0.9)


# ---- out-of-distribution scores of the graph, survival and scene kinds (hub.uncertainty.ood), on synthetic data -----

def _fit(model, kind: str, splits: dict, label_names=(), **spec):
    """hub.uncertainty.ood.fit_detector on ``splits``: the ``train``, ``val`` and ``test`` batches (or one ``graph``
    whose masks name them, for every split), for a card of input ``kind`` (and the rest of its input ``spec``)."""
    from hub.uncertainty import ood

    card = SimpleNamespace(name="synthetic", input_spec={"kind": kind, **spec}, label_names=list(label_names))
    data = SimpleNamespace(**{f"{split}_dataloader": (lambda s=split: [splits["graph"]] if "graph" in splits
                                                      else splits[s]) for split in ("train", "val", "test")})
    return ood.fit_detector(model.eval(), card, data)


def test_graph_node_energy_flags_featureless_nodes_and_about_one_percent_of_fresh_nodes():
    """Three classes of node features; the classifier's logits are the features' dot products with the class
    centres. Fitted at 1%: the test nodes flagged within 0-4%, nodes with all-zero features (uniform logits, high
    energy) at least 95%."""
    from torch_geometric.data import Data

    from hub.uncertainty import ood

    class NodeClassifier(torch.nn.Module):
        def __init__(self, centres):
            super().__init__()
            self.centres = torch.nn.Parameter(centres)

        def forward(self, x, edge_index):
            return x @ self.centres.T  # (N, classes)

    generator = torch.Generator().manual_seed(0)
    centres = torch.eye(3, 8) * 4
    labels = torch.randint(0, 3, (6000,), generator=generator)
    x = centres[labels] + torch.randn(6000, 8, generator=generator)
    masks = {f"{s}_mask": torch.arange(6000) // 2000 == i for i, s in enumerate(("train", "val", "test"))}
    graph = Data(x=x, edge_index=torch.zeros(2, 0, dtype=torch.long), y=labels, **masks)
    model = NodeClassifier(centres)
    detector, section = _fit(model, "graph", {"graph": graph}, ["a", "b", "c"])
    assert detector.scores == ["energy"] and "energy_offset" in detector.statistics
    assert 0.0 <= section["test_false_alarm_rate"] <= 0.04 and section["test_items"] == 2000
    shifted = graph.clone()
    shifted.x = torch.zeros_like(x)
    scores = detector.score(ood.node_split_outputs(model, shifted)["test"].components(detector))
    assert detector.flag(scores).mean() >= 0.95


def _survival_batches(clinical, genes, gene_mask) -> list:
    """``(inputs, (time, event))`` batches of 500 patients, as the survival data modules give them."""
    return [({"clinical": c, "genes": g, "gene_mask": m}, torch.zeros(len(c), 2))
            for c, g, m in zip(clinical.split(500), genes.split(500), gene_mask.split(500))]


def test_survival_covariates_out_of_range_or_with_a_new_empty_gene_are_flagged():
    """A DeepSurv MLP on standard-normal covariates (2 genes, 3 clinical): Mahalanobis with one mean plus the range
    check, fitted at 1%. Fresh patients flagged within 0-4%; one clinical value 10 standard deviations out: at least
    95%; an empty gene (never empty in training): all, with an infinite score."""
    from hub.uncertainty import ood
    from medical.models.deepsurv_mlp import deepsurv_mlp

    torch.manual_seed(0)
    model = deepsurv_mlp(num_genes=2, num_clinical=3)

    def patients(n):
        return torch.randn(n, 3), torch.randn(n, 2), torch.ones(n, 2, dtype=torch.bool)

    splits = {s: _survival_batches(*patients(n)) for s, n in (("train", 3000), ("val", 2000), ("test", 2000))}
    detector, section = _fit(model, "survival_table", splits)
    assert detector.scores == ["mahalanobis", "range"] and detector.statistics["means"].shape[0] == 1
    assert 0.0 <= section["test_false_alarm_rate"] <= 0.04
    clinical, genes, present = patients(500)

    def flagged(*inputs):
        card = SimpleNamespace(input_spec={"kind": "survival_table"})
        return detector.flag(ood.score_inputs(model, card, detector, _survival_batches(*inputs)))

    assert flagged(clinical + torch.tensor([10.0, 0, 0]), genes, present).mean() >= 0.95
    empty = present.clone()
    empty[:, 1] = False
    assert flagged(clinical, genes, empty).all()


def test_scene_reconstruction_error_flags_images_off_the_training_subspace():
    """An 'autoencoder' that projects images onto the 16-dimensional subspace its training images lie in (plus a
    little noise): fitted at 1%, fresh images flagged within 0-4%, images with noise in every direction at least
    95%."""
    from torch.utils.data import DataLoader, TensorDataset

    from hub.uncertainty import ood

    generator = torch.Generator().manual_seed(0)
    basis = torch.linalg.qr(torch.randn(3 * 8 * 8, 16, generator=generator))[0]  # (192, 16) orthonormal

    class Projector(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.basis = torch.nn.Parameter(basis)

        def forward(self, x):
            flat = x.flatten(1)
            return (flat @ self.basis @ self.basis.T).view_as(x)

    def images(n, off_subspace: float = 0.05):
        inside = torch.randn(n, 16, generator=generator) @ basis.T
        return (inside + off_subspace * torch.randn(n, 192, generator=generator)).view(n, 3, 8, 8)

    def loader(x):
        return DataLoader(TensorDataset(x, torch.zeros(len(x))), batch_size=256)

    model, spec = Projector(), {"mean": [0.0] * 3, "std": [1.0] * 3}
    detector, section = _fit(model, "scene", {s: loader(images(2000)) for s in ("train", "val", "test")}, **spec)
    assert detector.scores == ["reconstruction", "inputs"] and section["fitted_on"].startswith("statistics")
    assert 0.0 <= section["test_false_alarm_rate"] <= 0.04
    card = SimpleNamespace(input_spec={"kind": "scene", **spec})
    noisy = ood.score_inputs(model, card, detector, loader(images(500, off_subspace=0.2)))
    assert detector.flag(noisy).mean() >= 0.95


def test_grey_energy_scores_grey_images_of_a_colour_classifier_by_how_unsure_it_is(monkeypatch):
    """2% of the training images grey; the classifier is sure of bright images and unsure of mid-grey ones. The
    statistics keep the grey share (Laplace's rule) and at most MAX_FIT_ITEMS quantiles of the validation energies;
    a colour input scores 0, a grey one more the less sure the model is."""
    from torch.utils.data import DataLoader, TensorDataset

    from hub.uncertainty import ood

    monkeypatch.setattr(ood, "MAX_FIT_ITEMS", 500)
    generator = torch.Generator().manual_seed(0)

    def images(n, grey_share: float = 0.02):
        x = torch.rand(n, 3, 8, 8, generator=generator)
        grey = int(n * grey_share)
        x[:grey] = x[:grey, :1]  # its channels equal
        return x

    class Classifier(torch.nn.Module):  # logits (B, 2): sure for bright images, unsure near a mean of 0.5
        def __init__(self):
            super().__init__()
            self.sharpness = torch.nn.Parameter(torch.tensor(40.0))

        def forward(self, x):
            return torch.stack([self.sharpness * (x.mean((1, 2, 3)) - 0.5), torch.zeros(len(x))], 1)

    def loader(x):
        return DataLoader(TensorDataset(x, torch.zeros(len(x), dtype=torch.long)), batch_size=250)

    splits = {"train": loader(images(1000)), "val": loader(images(1000)), "test": loader(images(200))}
    detector, _ = _fit(Classifier(), "image", splits, ("a", "b"), channels=3, mean=[0.0] * 3, std=[1.0] * 3)
    assert detector.scores == ["energy", "inputs", "grey_energy"]
    # fitted on the first MAX_FIT_ITEMS (500) training images, 20 of them grey
    assert detector.statistics["grey_share"].item() == pytest.approx((20 + 1) / (500 + 2))
    energies = detector.statistics["val_energies"]
    assert len(energies) == 500 and bool((energies.diff() >= 0).all())
    x = torch.cat([images(1, grey_share=0), torch.full((1, 3, 8, 8), 0.9), torch.full((1, 3, 8, 8), 0.5)])
    columns = detector.components(None, Classifier()(x).detach(), None, summaries=ood.image_summary(x, {
        "mean": [0.0] * 3, "std": [1.0] * 3}))[:, 2]
    assert columns[0] == 0 and columns[2] > columns[1] >= -np.log(21 / 502)  # colour, grey and sure, grey unsure


def test_a_temperature_that_would_worsen_validation_ece_is_not_applied(monkeypatch):
    from hub.uncertainty import calibration

    rng = torch.Generator().manual_seed(0)
    logits = torch.randn(4000, 5, generator=rng) * 1.5
    labels = torch.multinomial(logits.softmax(1), 1, generator=rng).squeeze(1)  # calibrated as they are
    monkeypatch.setattr(calibration, "fit_temperature", lambda logits, labels: 4.0)  # far too soft
    figures = fit_temperature_figures(logits[:2000], labels[:2000], logits[2000:], labels[2000:])
    assert figures["temperature"] == 1.0 and figures["rejected_temperature"] == 4.0
    assert figures["val"]["ece_calibrated"] == figures["val"]["ece"]


def test_traffic_ranges_are_per_sensor_so_permuted_sensors_stand_out():
    from hub.uncertainty.ood import range_score, range_statistics

    rng = np.random.default_rng(0)
    levels = np.linspace(20, 70, 6)  # six roads, each with its own typical speed
    windows = levels[None, None, :, None] + rng.normal(0, 2, (500, 12, 6, 1))  # (S, T, N, C)
    stats = range_statistics(windows[:400].reshape(-1, 6, 1))
    assert tuple(stats["median"].shape) == (6, 1)
    fresh, permuted = windows[400:], windows[400:][:, :, ::-1]
    assert np.quantile(range_score(fresh, **stats), 0.99) < 5 < range_score(permuted, **stats).min()
    pooled = range_statistics(windows[:400].reshape(-1, 1))  # the network's pooled range holds every permutation
    assert range_score(permuted, **pooled).max() < 3


def test_sensor_order_keeps_a_network_through_rush_hour_and_breaks_for_permuted_sensors():
    """Six roads with their own speeds; a rush hour slows every road by a third: the order of the roads holds
    (score about 0, though every value leaves its road's range), a permutation of the roads breaks it."""
    from hub.uncertainty.ood import sensor_order_score, sensor_ranks

    rng = np.random.default_rng(0)
    levels = np.linspace(20, 70, 6)
    windows = levels[None, None, :, None] + rng.normal(0, 2, (200, 12, 6, 2))  # (S, T, N, C)
    ranks = torch.from_numpy(sensor_ranks(windows.mean(0, keepdims=True))[0])
    assert ranks.tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    rush_hour = sensor_order_score(windows * 0.66, ranks)
    permuted = sensor_order_score(windows[:, :, [3, 0, 5, 1, 4, 2]], ranks)
    assert rush_hour.max() < 0.1 and permuted.min() > 0.5


def test_spectrogram_summary_tells_smooth_speech_like_frames_from_white_noise():
    """The last statistic, the lag-one autocorrelation over time, is near 1 for slowly changing frames and near 0
    for independent ones; the summary has 8 bands' mean, spread and change, then it."""
    from hub.uncertainty.ood import spectrogram_summary

    generator = torch.Generator().manual_seed(0)
    noise = torch.randn(4, 128, 64, generator=generator)  # (B, F, T)
    smooth = torch.cumsum(noise, 2) / 8  # a random walk over time: each frame close to the last
    summaries = spectrogram_summary(torch.cat([smooth, noise]), {})
    assert summaries.shape == (8, 25)
    assert summaries[:4, -1].min() > 0.8 and summaries[4:, -1].abs().max() < 0.1


def test_audio_statistics_read_the_training_spectrograms_unaugmented():
    from audio.data import SpectrogramAugment, SpectrogramData

    specs, labels = torch.randn(6, 16, 20), torch.tensor([0, 1, 0, 1, 0, 1])
    data = SpectrogramData.__new__(SpectrogramData)
    data.batch_size, data.num_workers, data.seed = 4, 0, 0
    data.train_set = SpectrogramAugment(specs, labels, 2, seed=0, noise=1.0, mixup=1.0)
    augmented_x, soft_targets = next(iter(data.train_dataloader()))
    x, y = next(iter(data.statistics_dataloader()))
    assert soft_targets.dim() == 2 and not torch.allclose(augmented_x, specs[:4])
    assert torch.equal(x, specs[:4]) and torch.equal(y, labels[:4])


def test_max_softmax_and_max_logit_scores_rank_unsure_logits_above_sure_ones():
    """Uniform logits over C classes: MSP score 1 - 1/C, max logit score minus the common logit; a sure input scores
    lower than an unsure one under both, and the energy agrees."""
    from hub.uncertainty import ood

    uniform, sure = torch.zeros(1, 4), torch.tensor([[8.0, 0.0, 0.0, 0.0]])
    assert ood.max_softmax_score(uniform).item() == pytest.approx(0.75)
    assert ood.max_softmax_score(torch.full((1, 5), 3.0)).item() == pytest.approx(0.8)
    assert ood.max_logit_score(torch.tensor([[1.0, 3.0, -2.0]])).item() == pytest.approx(-3.0)
    logits = torch.cat([sure, uniform])
    for score in (ood.max_softmax_score, ood.max_logit_score, ood.energy):
        assert score(logits)[0] < score(logits)[1]
    assert ood.max_softmax_score(sure).item() == pytest.approx(3 * np.exp(-8) / (1 + 3 * np.exp(-8)), rel=1e-4)


def test_knn_score_is_zero_in_the_bank_and_grows_with_the_angle_to_it():
    """A point of the bank (or a scaled copy: features are normalised) is at distance 0 from its nearest
    neighbour; the k-th neighbour's distance grows as the point turns away from the bank; k is capped at the bank's
    size."""
    from hub.uncertainty import ood

    bank = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    assert ood.knn_score(torch.tensor([[0.0, 3.0], [2.0, 2.0]]), bank, k=1).tolist() == pytest.approx([0.0, 0.0])
    turned = torch.tensor([[1.0, 0.1], [1.0, -0.5], [-1.0, 0.0]])
    assert ood.knn_score(turned, bank, k=1).diff().gt(0).all()
    assert ood.knn_score(torch.tensor([[-1.0, 0.0]]), bank, k=50).item() == pytest.approx(2.0)  # k = 3: (1, 0)
    assert ood.knn_score(torch.zeros(0, 2), bank).shape == (0,)


def test_node_outputs_with_features_keep_the_logits_of_the_plain_pass():
    """``node_split_outputs(features=True)`` gives a node classifier's penultimate features from the pass whose
    logits the detector scores: the same logits as without them."""
    from torch_geometric.data import Data

    from graph.models.gat import gat
    from hub.uncertainty import ood

    torch.manual_seed(0)
    model = gat(in_channels=6, num_classes=3, hidden=4, heads=2).eval()
    masks = {f"{s}_mask": torch.arange(12) % 3 == i for i, s in enumerate(("train", "val", "test"))}
    graph = Data(x=torch.rand(12, 6), edge_index=torch.randint(0, 12, (2, 30)), y=torch.arange(12) % 3, **masks)
    plain, with_features = ood.node_split_outputs(model, graph), ood.node_split_outputs(model, graph, features=True)
    for split in ("train", "val", "test"):
        assert plain[split].features is None
        assert torch.allclose(plain[split].logits, with_features[split].logits)
        assert with_features[split].features.shape == (4, 8)  # (nodes of the split, heads * hidden)


def test_held_out_class_scores_leave_out_the_inputs_own_class_and_the_choice_follows_them():
    """An input's own logit and class mean are left out; a model whose logits are sure of the true class and flat
    elsewhere makes every held-out input look unsure (MSP, energy), while its features sit on their class means,
    equally far from the others: the choice is a logit score, with every candidate's AUROC recorded."""
    from hub.uncertainty.ood import SplitOutputs, choose_class_score, held_out_class_scores

    logits = torch.tensor([[4.0, 0.0, 0.0], [0.0, 4.0, 0.0]])
    held_out = held_out_class_scores(logits, torch.tensor([0, 1]))
    assert torch.allclose(held_out["msp"], torch.tensor([0.5, 0.5]))  # two equal logits left
    assert torch.allclose(held_out["max_logit"], torch.tensor([0.0, 0.0]))
    generator = torch.Generator().manual_seed(0)
    labels = torch.arange(3).repeat(100)
    logits = 6 * torch.nn.functional.one_hot(labels, 3).float() + torch.randn(300, 3, generator=generator)
    features = torch.nn.functional.one_hot(labels, 3).float() * 3 + torch.randn(300, 3, generator=generator)
    statistics = {"means": 3 * torch.eye(3), "precision": torch.eye(3)}
    val = SplitOutputs(features, logits, labels, None, None)
    chosen, aurocs = choose_class_score(val, statistics, "mahalanobis")
    assert set(aurocs) == {"mahalanobis", "energy", "msp"} and chosen == max(aurocs, key=aurocs.get)
    assert min(aurocs.values()) > 0.9  # each separates a held-out class from the known ones here


def test_split_outputs_keeps_features_for_baselines_and_the_model_own_logits():
    """``features=True`` keeps the penultimate features for KNN when no score reads them, while the logits stay the
    model's own forward (its test-time augmentation included), not ``forward_head(forward_features(x))``."""
    from torch.utils.data import DataLoader, TensorDataset

    from hub.uncertainty import ood

    class Mirrored(torch.nn.Module):  # forward averages the input and its mirror, as a test-time augmentation does
        def __init__(self):
            super().__init__()
            self.body, self.head = torch.nn.Linear(4, 3), torch.nn.Linear(3, 2)

        def forward_features(self, x):
            return self.body(x)

        def forward_head(self, x, pre_logits=False):
            return x if pre_logits else self.head(x)

        def forward(self, x):
            return 0.5 * (self.forward_head(self.forward_features(x)) + self.forward_head(self.forward_features(
                x.flip(-1))))

    torch.manual_seed(0)
    model, x = Mirrored().eval(), torch.randn(6, 4)
    loader = DataLoader(TensorDataset(x, torch.zeros(6, dtype=torch.long)), batch_size=4)
    plain = ood.split_outputs(model, loader, ["energy"], {})
    kept = ood.split_outputs(model, loader, ["energy"], {}, features=True)
    assert plain.features is None
    assert torch.allclose(kept.features, model.body(x).detach())
    assert torch.allclose(kept.logits, model(x).detach()) and torch.allclose(plain.logits, kept.logits)


def test_excess_combination_keeps_the_model_ranking_where_inputs_are_ordinary_and_flags_far_inputs():
    """Issue 47: an input score below its quantile must not outrank the model's score (as under ``max``), and one
    just past it (1% of in-distribution inputs) must not lift an input above every near-shift one (as under
    ``gated``); far past it, it counts by as much as it is past."""
    from hub.uncertainty.ood import Detector, _quantile_scale

    rng = np.random.default_rng(0)
    val = np.c_[rng.exponential(1.0, 1000), rng.exponential(1.0, 1000)]  # in-distribution: model score, input score
    test = np.c_[rng.exponential(1.0, 1000), rng.exponential(1.0, 1000)]
    near = np.c_[rng.exponential(3.0, 500), rng.exponential(1.0, 500)]  # the model unsure, the input ordinary
    far = np.c_[rng.exponential(1.0, 50), rng.uniform(20.0, 60.0, 50)]  # the model sure, the input far off
    statistics = {"scales": torch.tensor([_quantile_scale(c, 0.01) for c in val.T], dtype=torch.float64)}
    excess = Detector(["energy", "inputs"], statistics, 0.0)
    gated, largest = (dataclasses.replace(excess, combine=c) for c in ("gated", "max"))
    assert excess.combine == "excess"
    quiet = near[:, 1] < statistics["scales"][1].item()
    np.testing.assert_allclose(excess.score(near)[quiet], near[quiet, 0] / statistics["scales"][0].item())
    auroc = {d.combine: roc_auc_score(np.r_[np.zeros(1000), np.ones(500)], d.score(np.r_[test, near]))
             for d in (excess, gated, largest)}
    model_alone = roc_auc_score(np.r_[np.zeros(1000), np.ones(500)], np.r_[test, near][:, 0])
    assert auroc["excess"] >= model_alone - 0.002 and auroc["excess"] > auroc["gated"] > auroc["max"]
    flagged = excess.score(far) > _quantile_scale(excess.score(val), 0.01)
    assert flagged.all()
    with_nan = excess.score(np.array([[0.5, np.nan], [0.5, np.inf]]) * statistics["scales"].numpy())
    assert with_nan[0] == 0.5 and with_nan[1] == np.inf
    # every score an input score (no model score to keep): the largest, as before
    inputs = np.r_[val, near, far]
    assert (Detector(["range", "inputs"], statistics, 0.0).score(inputs) == largest.score(inputs)).all()


def test_a_card_keeps_the_combination_it_was_fitted_with(tmp_path):
    from hub.core.weights import save_state_dict
    from hub.uncertainty.ood import load_detector

    sha256 = save_state_dict({"scales": torch.ones(2, dtype=torch.float64)}, tmp_path / "ood.safetensors")
    section = {"score": "energy+inputs", "threshold": 1.0, "file": "ood.safetensors", "sha256": sha256}
    old = load_detector(SimpleNamespace(name="old", ood=section, card_dir=str(tmp_path)))
    gated, new = (load_detector(SimpleNamespace(name=c, ood={**section, "combine": c}, card_dir=str(tmp_path)))
                  for c in ("gated", "excess"))
    assert (old.combine, gated.combine, new.combine) == ("max", "gated", "excess")
    components = np.array([[0.2, 0.9], [0.2, 1.5]])
    np.testing.assert_allclose(old.score(components), [0.9, 1.5])
    np.testing.assert_allclose(gated.score(components), [0.2, 1.5])
    np.testing.assert_allclose(new.score(components), [0.2, 0.7])


def test_a_silent_score_counts_wherever_it_speaks():
    """grey_energy is 0 on every input of the common kind: below its quantile it still ranks a grey input above the
    model's score (CIFAR-10's photos in grey); ``inputs`` below its quantile does not; a silent score at 0 leaves the
    model's score as it is, negative too; past its quantile, an input score counts over a model score floored at 0."""
    from hub.uncertainty.ood import Detector

    statistics = {"scales": torch.ones(3, dtype=torch.float64)}
    excess = Detector(["energy", "inputs", "grey_energy"], statistics, 0.0)
    components = np.array([[0.2, 0.6, 0.0],   # colour, ordinary input: the model's score
                           [0.2, 0.0, 0.6],   # grey, below grey_energy's quantile: counts
                           [-0.5, 0.9, 0.0],  # a confident colour input: its negative model score stays
                           [0.2, 1.5, 0.0],   # the input summary past its quantile: its excess counts
                           [0.2, 1.5, 0.9],   # a silent score is not added (it is no excess over a quantile)
                           [-3.0, 2.0, 0.0]])  # a confident model does not cancel an input's excess: 0 + 1
    np.testing.assert_allclose(excess.score(components), [0.2, 0.6, -0.5, 0.7, 0.9, 1.0])
    gated = dataclasses.replace(excess, combine="gated")
    np.testing.assert_allclose(gated.score(components), [0.2, 0.6, -0.5, 1.5, 1.5, 2.0])
    # past the largest value validation held (1.8 here), an input score counts in full, as under gated
    held = dataclasses.replace(excess, statistics={**statistics, "maxima": torch.tensor([9.0, 1.8, 9.0])})
    np.testing.assert_allclose(held.score(components), [0.2, 0.6, -0.5, 0.7, 0.9, 2.0])
