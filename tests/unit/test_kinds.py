"""What an input kind declares is what the core does: its CLI options (``attnhub finetune``), and its OOD scores
(:mod:`hub.uncertainty.ood`), for a kind the core has never heard of."""
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
import torch

import hub.finetune
from hub.cli import main
from hub.errors import HubError
from hub.kinds import KINDS, InputKind, KindOption, KindSpec, OODProfile, kind_options


@pytest.fixture
def extra_kinds(monkeypatch):
    """Register kinds for one test: ``extra_kinds(KindClass, ...)``."""
    kind_options()  # every domain imported first, so that the test's entries are not overwritten

    def register(*classes):
        monkeypatch.setattr(KINDS, "_entries", {**KINDS._entries, **{cls.name: cls for cls in classes}})

    return register


def _finetune_help(capsys) -> str:
    with pytest.raises(SystemExit):
        main(["finetune", "--help"])
    return " ".join(capsys.readouterr().out.split())  # argparse's line breaks undone


class _WorkerEnded(Exception):
    pass


def test_finetune_lists_every_kinds_options_and_passes_them_on(monkeypatch, capsys):
    shown = _finetune_help(capsys)
    for option in kind_options():
        assert f"--{option.name} " in shown and option.help in shown
    assert {"target", "task", "time", "event", "genes", "outcomes", "label"} <= {o.name for o in kind_options()}

    called = {}
    monkeypatch.setattr(hub.finetune, "finetune", lambda *args, **kwargs: called.update(kwargs) or (None, None))
    monkeypatch.setattr("hub.run.train.is_ddp_worker", lambda: True)  # a worker ends once finetune has run...

    def end_worker():  # ...by os._exit, which would end pytest itself: raised instead
        raise _WorkerEnded

    monkeypatch.setattr("hub.cli._end_worker", end_worker)
    with pytest.raises(_WorkerEnded):
        main(["finetune", "deepsurv_mlp", "--data", "t.csv", "--genes", "a, b", "--time", "week"])
    assert called["genes"] == ["a", "b"] and called["time"] == "week" and called["target"] is None
    with pytest.raises(SystemExit):
        main(["finetune", "mlp", "--data", "t.csv", "--task", "ordinal"])  # not one of the kind's choices


def test_two_kinds_declaring_one_option_share_its_flag(extra_kinds, capsys):
    class First(InputKind):
        name, domain = "first_test_kind", "tests"
        options = (KindOption("weights_column", "first: the weight of each row"),)

    class Second(InputKind):
        name, domain = "second_test_kind", "tests"
        options = (KindOption("weights_column", "second: the weight of each unit"),)

    extra_kinds(First, Second)
    [option] = [o for o in kind_options() if o.name == "weights_column"]
    assert option.help == "first: the weight of each row; second: the weight of each unit"
    assert f"--weights-column WEIGHTS_COLUMN {option.help}" in _finetune_help(capsys)


@dataclass(frozen=True)
class _PointsSpec(KindSpec):
    dim: int


def test_a_new_kind_gets_the_ood_scores_its_profile_declares(extra_kinds):
    """A kind unknown to the core, of (B, 3) points: a classifier's energy plus the declared range check, fitted
    at 1%; points ten spreads out of range are flagged. A score the core does not know is refused, naming it."""
    from hub.uncertainty import ood

    class PointsKind(InputKind):
        name, domain, Spec = "points_test_kind", "tests", _PointsSpec
        ood = OODProfile(input_scores=("range",))

    class TypoKind(PointsKind):
        name = "typo_test_kind"
        ood = OODProfile(input_scores=("ranges",))

    extra_kinds(PointsKind, TypoKind)
    generator = torch.Generator().manual_seed(0)
    model = torch.nn.Linear(3, 2).eval()

    def batches(n):
        x = torch.randn(n, 3, generator=generator)
        return [(x[i:i + 250], torch.randint(0, 2, (250,), generator=generator)) for i in range(0, n, 250)]

    splits = {split: batches(2000) for split in ("train", "val", "test")}
    data = SimpleNamespace(**{f"{s}_dataloader": (lambda s=s: splits[s]) for s in splits})
    card = SimpleNamespace(name="points", input_spec={"kind": "points_test_kind", "dim": 3}, label_names=["a", "b"])
    detector, section = ood.fit_detector(model, card, data)
    assert detector.scores == ["energy", "range"] and section["score"] == "energy+range"
    assert 0.0 <= section["test_false_alarm_rate"] <= 0.04
    far = [(x + torch.tensor([10.0, 0, 0]), y) for x, y in batches(500)]
    assert detector.flag(ood.score_inputs(model, card, detector, far)).mean() >= 0.95
    with pytest.raises(HubError, match=r"unknown OOD score\(s\) \['ranges'\]"):
        ood.scores_for(SimpleNamespace(input_spec={"kind": "typo_test_kind"}, label_names=["a"]), model)
