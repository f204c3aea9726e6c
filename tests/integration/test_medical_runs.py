"""Medical fine-tuning runs end to end on synthetic survival tables and ICU records (no dataset): tags and bare
families through the CLI, then predict."""
from __future__ import annotations

import numpy as np
import pytest

import hub
import hub.kinds
from hub.run.evaluate import evaluate
from tests.unit.test_medical import _icu_folder, _user_survival_table


def test_cli_finetune_on_a_survival_table_with_its_own_column_names(tmp_path, capsys):
    """``attnhub finetune survival_fusion.metabric --data my.csv --time T --event E --genes a,b,c,d``."""
    from hub.cli import main

    card = hub.model_card("survival_fusion.metabric")
    generator = np.random.default_rng(0)
    header = ["T", "E", "a", "b", "c", "d", *card.input_spec["clinical"]]
    rows = [[f"{generator.exponential(100):.1f}", str(i % 2), *[f"{v:.3f}" for v in generator.normal(size=9)]]
            for i in range(80)]
    (tmp_path / "my.csv").write_text("\n".join(",".join(r) for r in [header, *rows]) + "\n")
    common = ["finetune", "survival_fusion.metabric", "--data", str(tmp_path / "my.csv"), "--time", "T", "--event", "E",
              "--output-dir", str(tmp_path / "runs"), "--no-progress", "--policy", "full", "trainer.max_epochs=1"]
    assert main(common + ["--genes", "a, b,c,d"]) == 0  # spaces after the commas are dropped
    (run,) = (tmp_path / "runs").glob("*/*")  # one policy: one run folder
    tuned = hub.model_card(str(run))
    assert tuned.input_spec["genes"] == ["a", "b", "c", "d"] and tuned.data["args"]["rank_weight"] == 8.0
    assert main(common + ["--genes", "a,b"]) == 2  # the card takes 4 genes
    assert "the model takes 4 gene columns" in capsys.readouterr().err
    assert main(["finetune", "vit_digits.sklearn", "--data", str(tmp_path), "--time", "T"]) == 2
    assert "--time do not apply" in capsys.readouterr().err


def test_cli_finetune_bare_survival_family_on_a_user_table_then_predict(tmp_path, capsys):
    """``attnhub finetune survival_fusion --data t.csv --time week --event arrest``: no genes, a categorical column,
    CoxPH beside it; the run predicts on rows with a category it never saw."""
    import csv
    import json
    from pathlib import Path

    from hub.cli import main

    table = _user_survival_table(tmp_path / "t.csv")
    assert main(["finetune", "survival_fusion", "--data", table, "--time", "week", "--event", "arrest",
                 "--output-dir", str(tmp_path / "runs"), "trainer.max_epochs=1", "trainer.accelerator=cpu",
                 "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "CoxPH on the same split: test/cindex" in out
    run = Path(out.split("run folder: ")[1].split()[0])
    kept = json.loads((run / "metrics.json").read_text())["baseline"]
    assert kept["name"] == "CoxPH" and kept["metric"] == "test/cindex" and set(kept["test"]) == {
        "test/cindex", "test/uno_c"}
    verdict = "the model is at least as good as CoxPH" if kept["model_is_better"] else "WARNING: CoxPH beats the model"
    assert verdict in out
    rows = list(csv.DictReader(open(run / kept["predictions"])))
    assert list(rows[0]) == ["time", "event", "risk"] and len(rows) == 48  # 20% of 240 patients
    card = hub.model_card(str(run))
    assert card.model_args["num_genes"] == 0 and card.model_args["num_clinical"] == 4
    assert card.input_spec["clinical"] == ["age", "stage=I", "stage=II", "stage=III"]
    assert card.input_spec["categories"] == {"stage": ["I", "II", "III"]}
    (tmp_path / "new.csv").write_text("id,age,stage\na,70,III\nb,50,IV\n")  # IV: no indicator is set
    assert main(["predict", str(run), str(tmp_path / "new.csv"), "--out", str(tmp_path / "risk.csv")]) == 0
    assert [r["file"] for r in csv.DictReader(open(tmp_path / "risk.csv"))] == ["a", "b"]


@pytest.mark.parametrize("family", ["tfcam", "icu_gru"])
def test_cli_trains_an_icu_family_from_scratch_on_a_folder_of_records(tmp_path, capsys, family):
    """``attnhub finetune tfcam --data FOLDER``: the stays' own three variables define the input; the logistic
    regression on stay summaries is fitted on the same split and kept beside the run's metrics."""
    import csv
    import json
    from pathlib import Path

    from hub.cli import main

    folder = _icu_folder(tmp_path / "stays")
    assert main(["finetune", family, "--data", str(folder), "--output-dir", str(tmp_path / "runs"),
                 "trainer.max_epochs=2", "trainer.accelerator=cpu", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "LogisticRegression on the same split: test/auroc" in out
    run = Path(out.split("run folder: ")[1].split()[0])
    summary = json.loads((run / "metrics.json").read_text())
    kept = summary["baseline"]
    assert kept["name"] == "LogisticRegression" and kept["metric"] == "test/auroc"
    assert kept["test"]["test/auroc"] > 0.9  # the label is in the lactate level
    # the metrics kept are those of the run's weights on its test split, evaluated again
    assert evaluate(str(run), progress=False)["test/auroc"] == pytest.approx(summary["test"]["test/auroc"], abs=1e-6)
    rows = list(csv.DictReader(open(run / kept["predictions"])))
    assert len(rows) == 12 and {r["id"] for r in rows} <= {str(140000 + i) for i in range(60)}  # 20% of 60
    card = hub.model_card(str(run))
    assert card.input_spec["variables"] == ["HR", "Lactate", "MAP"] and card.input_spec["hours"] == 48
    assert card.model_args["num_variables"] == 3 and card.data["sizes"] == [42, 6, 12]
    inputs = hub.transforms(str(run))(folder / "140003.txt")
    assert inputs["values"].shape == (48, 3) and inputs["mask"].sum() == 18


def test_tag_finetune_on_icu_records_drops_and_reports_unknown_variables(tmp_path, caplog):
    """``attnhub finetune tfcam.physionet2012 --data FOLDER`` on stays with a parameter the card does not know:
    the card's 37 variables stay the input, the unknown one is dropped and listed in the run's card. The folder's
    In-hospital_death is the card's outcome under the card's class names, so the tag's classifier is kept (trained
    fresh, a linear probe from it scored 0.655 test AUROC on PhysioNet's fold 0 against 0.744 for the tag as is)."""
    import json

    from hub.finetune import finetune

    folder = _icu_folder(tmp_path / "stays", n=40, variables=("HR", "MeanBP", "Lactate"))
    run, entry = finetune("tfcam.physionet2012", str(folder), ["trainer.max_epochs=1", "trainer.accelerator=cpu"],
                          str(tmp_path / "runs"), progress=False, policy="full")
    card = hub.model_card(str(run))
    assert card.data["unknown_variables_dropped"] == ["MeanBP"]
    assert "MAP" in card.data["variables_never_observed"] and "HR" not in card.data["variables_never_observed"]
    assert card.model_args["num_variables"] == 37 and len(card.input_spec["variables"]) == 37
    assert entry["name"] == "LogisticRegression"
    assert json.loads((run / "metrics.json").read_text())["policy"]["chosen"] == "full"
    assert card.label_names == ["survived", "died"] and "trained fresh" not in caplog.text
