"""``attnhub reproduce`` / ``hub.reproduce``: retrain a card's recipe and compare the test metrics with the card's."""
import json
from pathlib import Path

import hub
from hub.cli import main


def test_reproduce_graph_card_from_the_command_line(tmp_path, capsys):
    from graph.data import read_planetoid

    read_planetoid("Cora")  # first, so a missing Cora skips (tests/conftest.py) before the CLI reports it
    out = tmp_path / "out"
    assert main(["reproduce", "gat.cora", "trainer.max_epochs=5", "--seeds", "2", "--output-dir", str(out),
                 "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "0.8280 ± 0.0066 (n=10)" in printed  # the card's test accuracy beside the new one
    report_file = Path(printed.strip().splitlines()[-1].removeprefix("report: "))
    assert report_file.parent.parent == out / "gat_cora"  # under --output-dir, never a folder named by the card
    report = json.loads(report_file.read_text())
    assert report["seeds"] == [2] and report["overrides"] == ["trainer.max_epochs=5"]
    assert set(report["metrics"]) == {"test/acc", "test/f1", "test/loss"}
    assert all(isinstance(m["within"], bool) and m["rule"] == "2 std of the card" for m in report["metrics"].values())
    run_card = hub.model_card(str(report_file.parent))
    assert run_card.recipe["overrides"] == ["seed=2", "trainer.max_epochs=5"]  # the card's seed=1 replaced
    assert run_card.recipe["resolved"]["seed"] == 2 and run_card.recipe["resolved"]["trainer"]["max_epochs"] == 5
