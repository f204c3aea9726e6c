"""The shared tasks compute their metrics right, for two classes as for many."""
import torch

from hub.tasks import create_task


def _metrics(num_classes, logits, target):
    task = create_task("classification", num_classes=num_classes)
    metrics = task.metrics()
    _, preds, y = task.step(lambda x: x, (logits, target), "val")
    metrics.update(preds, y)
    return {k: float(v) for k, v in metrics.compute().items()}


def test_binary_accuracy_and_auroc():
    logits = torch.tensor([[2.0, 0.0], [0.0, 2.0], [1.0, 0.0], [0.0, 1.0]])
    result = _metrics(2, logits, torch.tensor([0, 1, 1, 1]))
    assert result["acc"] == 0.75 and result["auroc"] == 1.0


def test_multiclass_accuracy():
    logits = torch.eye(3)[[0, 1, 2, 2]]
    result = _metrics(3, logits, torch.tensor([0, 1, 2, 0]))
    assert result["acc"] == 0.75
