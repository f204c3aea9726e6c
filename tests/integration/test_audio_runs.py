"""Audio fine-tuning runs end to end on generated tones and clips (no dataset): a tag and a bare family on the user's
folders, then predict."""
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

import hub
from audio.features import SAMPLE_RATE
from tests.unit.test_audio import _tone_folder


@pytest.mark.slow
def test_finetune_and_predict_on_an_audio_folder(tmp_path, capsys):
    from hub.cli import main

    folder = _tone_folder(tmp_path / "tones")
    assert main(["finetune", "ast_tiny.fsdd", "--data", str(folder), "--output-dir", str(tmp_path / "runs"),
                 "--no-progress", "--cv-folds", "0", "trainer.max_epochs=2", "data.args.batch_size=4",
                 "data.args.val_fraction=0.25",
                 "data.args.test_fraction=0.25"]) == 0
    run = capsys.readouterr().out.split("run folder: ")[1].split()[0]  # then the baseline's lines
    shipped = hub.load("ast_tiny.fsdd").pretrained_cfg.input_spec
    tuned = hub.load(run).pretrained_cfg.input_spec
    assert (tuned["lifter"], tuned["time_fit"]) == (shipped["lifter"], shipped["time_fit"])  # as the weights learnt
    files = [str(p) for p in sorted(folder.rglob("*.*"))[:3]]
    assert main(["predict", run, *files, "--top-k", "2", "--out", str(tmp_path / "preds.csv"), "--no-progress"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    # top-2 classes with probabilities, then the run's OOD columns (fitted at the end of the fine-tune)
    assert len(lines) == 3 and lines[0].startswith(files[0]) and len(lines[0].split()) == 7
    assert (tmp_path / "preds.csv").read_text().splitlines()[0] == "file,class_1,prob_1,class_2,prob_2,ood_score,ood"
    sf.write(tmp_path / "silent.wav", np.zeros(4000, dtype=np.float32), SAMPLE_RATE)
    assert main(["predict", run, str(tmp_path / "silent.wav"), "--no-progress"]) == 2
    assert "silent.wav is silent" in capsys.readouterr().err
    assert main(["explain", run, files[0], "--out", str(tmp_path / "fig")]) == 0  # attention over the spectrogram
    assert (tmp_path / "fig" / f"{Path(files[0]).stem}_explain.png").stat().st_size > 1000


def test_cli_finetune_bare_family_on_wav_folders_of_other_speakers(tmp_path, capsys):
    """timbre_attention from scratch on ``train/<class>`` and a ``test/<class>`` of other clips (as other speakers
    would be), set beside logistic regression on MFCC statistics, which must separate tones of 300 and 2500 Hz."""
    import csv
    import json

    from hub.cli import main

    root = tmp_path / "tones"
    _tone_folder(root / "train", per_class=8)  # no val/: a stratified part of train/
    _tone_folder(root / "test", per_class=3)
    assert main(["finetune", "timbre_attention", "--data", str(root), "--output-dir", str(tmp_path / "runs"),
                 "--cv-folds", "2", "trainer.max_epochs=1", "trainer.accelerator=cpu", "--no-progress",
                 "data.args.batch_size=4"]) == 0
    out = capsys.readouterr().out
    run = Path(out.split("run folder: ")[-1].split()[0])
    entry = json.loads((run / "metrics.json").read_text())["predictor"]  # issue 68: chosen on 2 folds, refitted
    assert entry["selection"] == "cross-validation" and entry["folds"] == 2 and "refit: true" in (
        run / "recipe.yaml").read_text()
    assert hub.model_card(str(run)).label_names == ["high", "low"]
    summary = json.loads((run / "metrics.json").read_text())
    kept = summary["baseline"]
    assert kept["name"].startswith("logistic regression on MFCC statistics") and kept["metric"] == "test/acc"
    assert kept["test"]["test/acc"] == 1.0 and kept["test"]["test/auroc"] == 1.0
    verdict = "is at least as good as logistic regression" if kept["model_is_better"] else "WARNING: logistic"
    assert verdict in out
    rows = list(csv.DictReader(open(run / kept["predictions"])))
    assert sorted(r["file"] for r in rows) == sorted(p.relative_to(root).as_posix() for p in root.glob("test/*/*"))
    assert all(r["target"] == r["prediction"] for r in rows)
