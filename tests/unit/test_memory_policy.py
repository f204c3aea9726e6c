"""``attnhub finetune --policy memory`` (issue 66, item 3): the recipe it trains, the family check, and the run folder
it writes answering both tasks through ``hub.load``, ``predict --task`` and ``serve``'s ``?task=``. The run folder is
written by the training's own writer (:func:`hub.run.folder.write_model`) after a few optimiser steps of the memory
tokens on random labels: no dataset, no training run."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from PIL import Image

import hub
from hub.attention.memory_tokens import MemoryTokens
from hub.cli import build_parser
from hub.deploy.predict import file_predictions
from hub.deploy.tasks import task_model
from hub.errors import HubError
from hub.finetune import POLICIES, auto_candidates, finetune_recipe
from hub.recipe import recipe_from_dict
from hub.run.folder import write_model

NAME = "vit_digits.sklearn"  # a tiny ViT of timm Blocks on 8x8 digits
NEW_CLASSES = ["even", "odd", "zero"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A memory-token run from NAME, its new task trained a few steps, written as training writes it."""
    torch.manual_seed(0)
    card = hub.model_card(NAME)
    recipe = recipe_from_dict(card.recipe["resolved"], "test")
    recipe = recipe.replace(model=recipe.model.replace(init_from=NAME, memory_tokens=2))
    model = MemoryTokens(hub.load(NAME), num_classes=len(NEW_CLASSES), tokens_per_layer=2).train()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=0.05)
    x, y = torch.randn(8, 1, 8, 8), torch.randint(0, len(NEW_CLASSES), (8,))
    for _ in range(3):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    data = SimpleNamespace(model_args=lambda: {"num_classes": len(NEW_CLASSES)}, input_spec=card.input_spec,
                           label_names=NEW_CLASSES, output_names=[], info={})
    folder = tmp_path_factory.mktemp("memory-run")
    write_model(folder, recipe, data, model.eval(), {"test/acc": 0.5}, None, None)
    return folder


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    folder = tmp_path_factory.mktemp("digits")
    rng = np.random.default_rng(0)
    paths = []
    for i in range(5):
        paths.append(folder / f"{i}.png")
        Image.fromarray(rng.integers(0, 255, (8, 8), dtype=np.uint8), mode="L").save(paths[-1])
    return [str(p) for p in paths]


def test_the_source_logits_are_bit_identical_after_the_new_task_is_added(run_dir):
    """Every source logit of the run loaded from its folder equals the pretrained tag's, bit for bit, while the new
    task's logits are the trained ones (not the untrained head's)."""
    x = torch.randn(16, 1, 8, 8)
    with torch.inference_mode():
        expected = hub.load(NAME)(x)
        loaded = hub.load(run_dir)
        source, new = loaded.forward_both(x)
    assert isinstance(loaded, MemoryTokens) and loaded.tokens_per_layer == 2
    assert torch.equal(source, expected), f"{(source - expected).abs().max()} off the source task"
    assert new.shape == (16, len(NEW_CLASSES))
    card = hub.model_card(run_dir)
    assert card.memory_tokens["policy"] == "memory" and card.memory_tokens["source"] == NAME
    assert card.memory_tokens["tokens_per_layer"] == 2
    assert card.memory_tokens["source_label_names"] == hub.model_card(NAME).label_names
    assert card.label_names == NEW_CLASSES
    trained = [n for n, p in loaded.named_parameters() if not n.startswith("model.")]
    assert sorted(trained) == ["cls_token", "head.bias", "head.weight", "memory"]


def test_predict_answers_the_new_task_the_source_task_or_both(run_dir, images):
    def rows(model):
        return [(header, row) for header, batch in file_predictions(model, images, batch_size=2, top_k=2)
                for row in batch]

    loaded = hub.load(run_dir)
    new = rows(task_model(loaded, "new", str(run_dir)))
    source = rows(task_model(hub.load(run_dir), "source", str(run_dir)))
    both = rows(task_model(hub.load(run_dir), "both", str(run_dir)))
    tag = rows(hub.load(NAME))
    assert {row[1] for _, row in new} <= set(NEW_CLASSES)
    assert new[0][0][:5] == ["file", "class_1", "prob_1", "class_2", "prob_2"]
    assert source[0][0] == ["file", "class_1", "prob_1", "class_2", "prob_2"]  # no OOD columns
    assert [row for _, row in source] == [row[:5] for _, row in tag], "the source task answers as the tag does"
    header = both[0][0]
    assert header[:9] == ["file", "class_1", "prob_1", "class_2", "prob_2", "source_class_1", "source_prob_1",
                          "source_class_2", "source_prob_2"]
    for (_, b), (_, n), (_, s) in zip(both, new, source):
        assert b[:5] == n[:5] and b[5:9] == s[1:5] and b[9:] == n[5:]


def test_a_task_other_than_new_needs_a_memory_token_run():
    with pytest.raises(HubError, match="--policy memory"):
        task_model(hub.load(NAME), "source", NAME)
    with pytest.raises(HubError, match="expected one of"):
        task_model(hub.load(NAME), "old", NAME)
    args = build_parser().parse_args(["predict", NAME, "a.png", "--task", "both"])
    assert args.task == "both" and build_parser().parse_args(["predict", NAME, "a.png"]).task == "new"


def test_serve_answers_the_task_asked(run_dir, images):
    pytest.importorskip("fastapi")
    pytest.importorskip("httpx")
    from fastapi.testclient import TestClient

    from hub.deploy.serve import build_app, load_served

    files = [("files", (f"{i}.png", open(p, "rb").read(), "image/png")) for i, p in enumerate(images[:2])]
    with TestClient(build_app(load_served(str(run_dir)), "run", max_batch_size=8, max_wait_ms=1)) as client:
        answers = {task: client.post("/predict", files=files, params={"top_k": 2, "task": task})
                   for task in ("new", "source", "both")}
        assert client.post("/predict", files=files, params={"task": "old"}).status_code == 400
    for task, response in answers.items():
        assert response.status_code == 200, response.text
        assert response.json()["task"] == task
    new, source, both = (answers[t].json()["predictions"] for t in ("new", "source", "both"))
    assert new[0]["class_1"] in NEW_CLASSES and source[0]["class_1"] in hub.model_card(NAME).label_names
    assert both[0]["class_1"] == new[0]["class_1"] and both[0]["source_class_1"] == source[0]["class_1"]
    assert isinstance(both[0]["source_prob_1"], float) and 0 <= both[0]["source_prob_1"] <= 1
    with TestClient(build_app(load_served(NAME), NAME, max_batch_size=8, max_wait_ms=1)) as client:
        refused = client.post("/predict", files=files, params={"task": "source"})
    assert refused.status_code == 400 and "answers ['new']" in refused.json()["detail"]


def test_the_memory_policy_recipe_and_its_option():
    recipe = finetune_recipe(NAME, "mine", policy="memory", memory_tokens=3)
    assert recipe.model.memory_tokens == 3 and recipe.model.init_from == NAME and not recipe.model.freeze_backbone
    assert recipe.optimizer.backbone_lr_scale == 1.0 and recipe.optimizer.layer_decay is None
    assert finetune_recipe(NAME, "mine", policy="full").model.memory_tokens is None
    args = build_parser().parse_args(["finetune", NAME, "--data", "mine", "--policy", "memory", "--memory-tokens", "7"])
    assert (args.policy, args.memory_tokens) == ("memory", 7)
    assert build_parser().parse_args(["finetune", NAME, "--data", "mine"]).memory_tokens == 5


def test_a_family_without_timm_blocks_is_refused_naming_those_that_qualify():
    with pytest.raises(HubError) as err:
        finetune_recipe("coat_lite_micro_32.cifar10_20k", "mine", policy="memory")
    text = str(err.value)
    assert "coat_lite_micro_32" in text and "timm Blocks" in text
    assert all(tag in text for tag in ("vit_digits.sklearn", "cct_4_3x2_32.cifar10", "ast_tiny.fsdd"))
    with pytest.raises(HubError, match="at least 1"):
        finetune_recipe(NAME, "mine", policy="memory", memory_tokens=0)


def test_auto_does_not_train_memory_tokens():
    """The grid's decision (benchmarks/results/finetune_policy.md): memory tokens are asked for by name, never one of
    auto's candidates, at any size, with or without a classifier."""
    assert "memory" in POLICIES
    for per_class in (1, 15, 50, 150, 5000):
        assert "memory" not in auto_candidates(per_class, True) + auto_candidates(per_class, False)
