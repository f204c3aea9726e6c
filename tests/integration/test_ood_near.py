"""Near shifts (benchmarks/uncertainty.py, ``NEAR``): the AUROC of the hub's ``ood_score`` and of the maximum softmax
probability (MSP) from the same forward pass, for one near shift per domain: each test fails when ``ood_score`` ranks
the shifted inputs below MSP (a regression's: below the width of its 90% interval) by more than :data:`TIE`, issue
47's allowance for ties, and holds the baseline to what was measured (within :data:`MARGIN`) so that a weaker model
cannot pass by weakening the baseline too. CIFAR-10's open set with models trained without the unknown
classes is ``benchmarks/open_set.py`` (half an hour a model, not run here); the image test here fine-tunes a shipped
tag's head on 6 classes. The models are trained by the
benchmark (seeded) into ``runs/near_shift/`` and reused from there; without them, the test trains them first (seconds
for the graph, a minute for the table and the RUL model, about ten for the audio model on 2 cores)."""
from __future__ import annotations

import pytest

MARGIN = 0.05  # how far MSP's AUROC may drift from the measured one (seeded runs, other threads and BLAS)
TIE = 0.01  # ood_score may rank below MSP by at most this much


def _measured(key: str) -> dict[str, float]:
    from benchmarks.uncertainty import aurocs, near_shift

    near = near_shift(key)
    (shifted,) = near.sets.values()
    return aurocs(near.card, near.inside, shifted, near.bank)


def test_held_out_graph_classes():
    """gat on Cora with the labels of classes 5 and 6 dropped; their 167 test nodes against the known classes' 833.
    Measured (2026-12-05): ood_score (the energy) 0.860, MSP 0.821."""
    found = _measured("cora")
    assert found["ood_score"] >= found["MSP"] - TIE, found
    assert found["MSP"] == pytest.approx(0.821, abs=MARGIN)


@pytest.mark.slow  # a linear probe of the shipped airbench_cbam_32.cifar10 when runs/near_shift/ holds none
def test_held_out_image_classes():
    """airbench_cbam_32.cifar10 fine-tuned by linear probe on 6 CIFAR-10 classes (500 unseen images each); 1,200
    test images of the 4 other classes (dog, truck, frog, cat) against the 6 classes' 1,800 (test accuracy 0.934; the
    probe's fit took 3 minutes at one thread). Measured (2026-12-06, excess combination): ood_score 0.929, MSP 0.916,
    energy 0.939, KNN 0.955."""
    found = _measured("cifar10")
    assert found["ood_score"] >= found["MSP"] - TIE, found
    assert found["MSP"] == pytest.approx(0.916, abs=MARGIN)


def test_table_rows_of_another_population():
    """mlp on Adult's rows of people born in the United States (``native_country`` dropped); the 4,153 rows of people
    born elsewhere against the 6,576 test rows. Measured (2026-12-05, scores combined by max): ood_score 0.542, MSP
    0.459 (both near chance: the detector, Mahalanobis and the range check, barely tells the populations apart; it
    beats MSP, which ranks them below chance); on 2026-12-06 with the gated and the excess combinations: 0.601."""
    found = _measured("adult")
    assert found["ood_score"] >= found["MSP"] - TIE, found
    assert found["MSP"] == pytest.approx(0.459, abs=MARGIN)


@pytest.mark.slow  # about ten minutes when runs/near_shift/ holds no trained model
def test_unheard_spoken_digits():
    """ast_tiny on FSDD's digits 0-4; the test speaker's 250 clips of digits 5-9 against their 250 of digits 0-4.
    Measured (2026-12-05, energy chosen by the held-out-class rule): ood_score 0.917, MSP 0.908, energy 0.924; on
    2026-12-06, trained at one thread (benchmarks.uncertainty.near_audio): ood_score 0.929, MSP 0.884, energy 0.928.
    Trained at two threads the run differs (test acc 0.988 against 0.980) and its ood_score (0.918) fell below MSP
    (0.939): issue 47's gap. Retrained at one thread on 2026-12-06 on another machine, with the gated combination:
    ood_score 0.902, MSP 0.908, energy 0.898 (within TIE); refitted with the excess combination: ood_score 0.901."""
    found = _measured("fsdd")
    assert found["ood_score"] >= found["MSP"] - TIE, found
    assert found["MSP"] == pytest.approx(0.908, abs=MARGIN)


def test_engines_that_fail_sooner():
    """rul_attention on the FD001 training engines that lived over the median (199 cycles); the other 50 engines cut
    at random cycles (300 windows) against its 7 test engines' 1,508 windows. Measured (2026-12-06, gated):
    ood_score 0.493 (the same refitted with the excess combination), interval width 0.470, KNN 0.537: no score tells
    them apart; the test holds the detector to the width's level."""
    found = _measured("fd001")
    assert found["ood_score"] >= found["width"] - TIE, found
    assert found["width"] == pytest.approx(0.470, abs=MARGIN)


def test_traffic_sensors_swapped():
    """The shipped testam.los_loop; 300 of its test windows with 10% of the 207 sensors swapped in pairs against its
    399 test windows. Measured (2026-12-06, gated and excess alike: its scores are all input scores): ood_score 0.624
    (the range check and the sensors' order), interval width 0.475."""
    found = _measured("los_loop")
    assert found["ood_score"] >= found["width"] - TIE, found
    assert found["width"] == pytest.approx(0.475, abs=MARGIN)

