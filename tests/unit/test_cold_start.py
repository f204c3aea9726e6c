"""Loading a model for inference imports what inference needs (issue 69): no Lightning, no torchmetrics, no domain's
training data modules. Checked in a fresh interpreter, one tag per domain, since this test process has imported them
all."""
import json
import os
import subprocess
import sys

import pytest

TAGS = ["vit_digits.sklearn", "gat.cora", "ast_tiny.fsdd", "tabr.adult", "survival_fusion.metabric",
        "tfcam.physionet2012", "rul_attention.fd001", "testam.los_loop"]
# top-level packages that training needs and inference must not import
TRAINING_PACKAGES = ("lightning", "pytorch_lightning", "lightning_fabric", "torchmetrics")
# the domains' dataset modules and the fast training image path
DATA_MODULES = ("vision.data", "vision.resident", "graph.data", "audio.data", "tabular.data", "medical.icu_data",
                "medical.survival_data", "timeseries.data", "hub.data", "hub.run")

SCRIPT = """
import json, sys
import hub
found = {}
for tag in sys.argv[1:]:
    hub.load(tag)
    found[tag] = sorted(name for name in sys.modules
                        if name.split(".")[0] in %r or name in %r)
print(json.dumps(found))
""" % (TRAINING_PACKAGES, DATA_MODULES)


def _imported_after_load(tags: list[str]) -> dict[str, list[str]]:
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    done = subprocess.run([sys.executable, "-c", SCRIPT, *tags], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_hub_load_imports_no_lightning_nor_training_data_modules():
    found = _imported_after_load(TAGS)
    assert set(found) == set(TAGS)
    assert {tag: names for tag, names in found.items() if names} == {}


def test_the_check_sees_lightning_when_it_is_imported():
    """The subprocess check can fail: a script that imports a training data module is caught."""
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    code = SCRIPT.replace("hub.load(tag)", "hub.load(tag); import hub.data")
    done = subprocess.run([sys.executable, "-c", code, "vit_digits.sklearn"], capture_output=True, text=True, env=env,
                          timeout=300)
    assert "pytorch_lightning" in json.loads(done.stdout.strip().splitlines()[-1])["vit_digits.sklearn"]


@pytest.mark.parametrize("tag", ["vit_digits.sklearn"])
def test_a_loaded_models_task_and_kind_are_found_without_its_data_modules(tag):
    """The registry imports a domain's kinds and tasks on demand once only its models are imported."""
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    code = ("import hub, sys\nfrom hub.kinds import kind_of\nfrom hub.tasks import create_task\n"
            f"m = hub.load({tag!r})\nprint(kind_of(m.pretrained_cfg).name)\n"
            "print(type(create_task('object_discovery')).__name__)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == ["image", "ObjectDiscoveryTask"]


def test_predict_imports_only_the_familys_module(tmp_path):
    """`attnhub predict` of an airbench_cbam image imports that family's module, not its domain's other families
    nor timm or torchvision, which it does not use (1.5 s of a 2-s cold start)."""
    import numpy as np
    from PIL import Image

    image = tmp_path / "image.png"
    Image.fromarray(np.zeros((32, 32, 3), dtype=np.uint8)).save(image)
    code = ("import sys\nfrom hub.cli import main\n"
            f"main(['predict', 'airbench_cbam_32.cifar10', {str(image)!r}, '--no-progress'])\n"
            "print(sorted(n for n in sys.modules if n.split('.')[0] in ('timm', 'torchvision') "
            "or n.startswith('vision.models.')))")
    env = {**os.environ, "PYTHONPATH": os.getcwd(), "HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "['vision.models.airbench', 'vision.models.airbench_cbam']"
