"""The resolved recipes of ``attnhub finetune`` stay as recorded: a pretrained tag under each policy, and a bare
family of every kind with a default recipe, on tiny data written to a temporary folder (no dataset, no training).

``finetune_recipes.json`` beside this file holds each case's resolved recipe (the values other than the schema's
defaults, so that a field added to the schema changes no case), recorded from the code before recipes were built as
typed objects (issue 49, item 3); a change to any value, or to its type (``125`` against ``125.0``), fails naming the
dotted key. After a deliberate change to a recipe, record again with
``PYTHONPATH=. python tests/unit/test_finetune_recipes.py`` and review the diff of the JSON file.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

RECORDED = Path(__file__).with_name("finetune_recipes.json")
SURVIVAL_GENES = ["MKI67", "EGFR", "PGR", "ERBB2"]  # survival_fusion.metabric's gene columns
FD001_SENSORS = ["s2", "s3", "s4", "s7", "s8", "s9", "s11", "s12", "s13", "s14", "s15", "s17", "s20", "s21"]

# (case, name, data path, finetune_recipe's keyword arguments); the paths are relative to the temporary folder
CASES: list[tuple[str, str, str, dict[str, Any]]] = [
    ("tag-linear-probe", "vit_digits.sklearn", "images", {"policy": "linear-probe"}),
    ("tag-full", "vit_digits.sklearn", "images", {"policy": "full"}),
    ("tag-lp-ft", "vit_digits.sklearn", "images", {"policy": "lp-ft", "probe": Path("runs/probe")}),
    ("tag-full-recipe-lr", "vit_digits.sklearn", "images", {"policy": "full-recipe-lr"}),
    ("tag-memory", "vit_digits.sklearn", "images", {"policy": "memory", "memory_tokens": 3}),
    ("tag-full-overridden", "coat_lite_micro_32.cifar10_20k", "images", {
        "policy": "full", "overrides": ["trainer.max_epochs=12", "optimizer.lr=0.01", "optimizer.layer_decay=0.9"],
        "output_dir": "elsewhere", "budget_minutes": None}),
    ("tag-audio", "ast_tiny.fsdd", "clips", {"policy": "full"}),
    ("tag-graph", "gat.cora", "graph", {"policy": "full"}),
    ("tag-table", "mlp.adult", "table.csv", {"policy": "linear-probe", "target": "income"}),
    ("tag-survival", "survival_fusion.metabric", "patients.csv", {"policy": "full", "time": "months"}),
    ("tag-icu", "tfcam.physionet2012", "stays", {"policy": "full", "outcomes": "outcomes.csv", "label": "died"}),
    ("tag-sensors", "rul_attention.fd001", "units", {"policy": "full"}),
    ("tag-traffic", "testam.los_loop", "speeds", {"policy": "full-recipe-lr"}),
    ("tag-scene", "slot_autoencoder_micro_64.shapes", "images", {"policy": "full"}),
    ("image", "vit_digits", "images", {}),
    ("image-rgb", "coat_lite_micro_32", "images", {}),
    ("image-imagenet-stem", "resnet_cbam18", "images", {"overrides": ["trainer.max_epochs=3"]}),
    ("scene", "slot_autoencoder_micro_64", "images", {}),
    ("audio", "timbre_attention", "clips", {}),
    ("audio-transformer", "ast_tiny", "clips", {"output_dir": "elsewhere"}),
    ("graph-gat", "gat", "graph", {}),
    ("graph-gatv2", "gatv2", "graph", {}),
    ("graph-cat", "cat", "graph", {}),
    ("survival", "deepsurv_mlp", "patients.csv", {"time": "months", "event": "died", "genes": ["MKI67", "EGFR"]}),
    ("survival-fusion", "survival_fusion", "patients.csv", {"time": "months", "event": "died"}),
    ("icu-tfcam", "tfcam", "stays", {"outcomes": "outcomes.csv", "label": "died"}),
    ("icu-gru", "icu_gru", "stays", {}),
    ("table", "mlp", "table.csv", {"target": "income"}),
    ("table-tabr", "tabr", "table.csv", {"target": "income", "task": "regression"}),
    ("sensors", "rul_attention", "units", {}),
    ("sensors-gru", "rul_attention_gru", "units", {"overrides": ["data.args.batch_size=32"]}),
    ("traffic-testam", "testam", "speeds", {}),
    ("traffic-gru", "traffic_gru", "speeds", {}),
]


def write_tiny_data(root: Path) -> None:
    """What ``finetune_data`` reads of the user's data: a graph folder's header, a survival table's header, the
    sensor columns of unit CSVs (3 units); the other kinds read nothing before training."""
    (root / "graph").mkdir()
    (root / "graph" / "nodes.csv").write_text("id,label,f0,f1\na,0,1,0\nb,1,0,1\n")
    (root / "graph" / "edges.csv").write_text("src,dst\na,b\n")
    (root / "patients.csv").write_text(",".join(["months", "event", *SURVIVAL_GENES, "age"]) + "\n1,0,1,2,3,4,50\n")
    (root / "units").mkdir()
    for unit in range(3):
        (root / "units" / f"unit{unit}.csv").write_text(",".join(["cycle", *FD001_SENSORS]) + "\n"
                                                        + ",".join(["1"] * (1 + len(FD001_SENSORS))) + "\n")


def resolved_recipes(root: Path) -> dict[str, dict[str, Any]]:
    """Each case's resolved recipe as a dict, the data written to (and paths relative to) ``root``."""
    from hub.finetune import finetune_recipe

    write_tiny_data(root)
    here = Path.cwd()
    os.chdir(root)
    try:
        return {case: finetune_recipe(name, data, **kwargs).model_dump(mode="json", exclude_defaults=True)
                for case, name, data, kwargs in CASES}
    finally:
        os.chdir(here)


def _flat(value: Any, key: str = "") -> dict[str, tuple[str, Any]]:
    """``{dotted key: (type name, value)}`` of a nested dict, so that 125 and 125.0 differ."""
    if isinstance(value, dict):
        return {k: v for name, item in value.items() for k, v in _flat(item, f"{key}.{name}".lstrip(".")).items()}
    return {key: (type(value).__name__, value)}


@pytest.fixture(scope="module")
def resolved(tmp_path_factory) -> dict[str, dict[str, Any]]:
    return resolved_recipes(tmp_path_factory.mktemp("user-data"))


@pytest.mark.parametrize("case", [c[0] for c in CASES])
def test_the_resolved_recipe_is_the_recorded_one(resolved, case):
    expected, actual = _flat(json.loads(RECORDED.read_text())[case]), _flat(resolved[case])
    changed = {k: (expected.get(k), actual.get(k)) for k in expected.keys() | actual.keys()
               if expected.get(k) != actual.get(k)}
    assert not changed, f"{case}: (recorded, now) of each changed key: {changed}"


def test_every_case_is_recorded():
    assert sorted(json.loads(RECORDED.read_text())) == sorted(c[0] for c in CASES)


if __name__ == "__main__":  # record again: PYTHONPATH=. python tests/unit/test_finetune_recipes.py
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        RECORDED.write_text(json.dumps(resolved_recipes(Path(folder)), indent=1, sort_keys=True) + "\n")
    print(f"recorded {len(CASES)} recipes in {RECORDED}", file=sys.stderr)
