"""Graph tasks: full-batch node classification (masks pick the split) and graph classification."""
from __future__ import annotations

import torch.nn.functional as F
import torchmetrics

from hub.tasks import ClassificationTask, register_task


class _MulticlassTask(ClassificationTask):
    """Accuracy and macro F1 from class probabilities (N, C), two classes included."""

    def metrics(self) -> torchmetrics.MetricCollection:
        return torchmetrics.MetricCollection({
            "acc": torchmetrics.Accuracy(task="multiclass", num_classes=self.num_classes),
            "f1": torchmetrics.F1Score(task="multiclass", num_classes=self.num_classes, average="macro"),
        })

    def _scored(self, logits, target, stage):
        loss = F.cross_entropy(logits, target, label_smoothing=self.label_smoothing if stage == "train" else 0.0)
        return loss, logits.detach().float().softmax(-1), target


@register_task("node-classification")
class NodeClassificationTask(_MulticlassTask):
    """One graph per batch (a PyG ``Data`` with ``x``, ``edge_index``, ``y`` and ``{train,val,test}_mask``):
    the model runs over the whole graph and the stage's mask selects the nodes that are scored."""

    def step(self, model, batch, stage):
        mask = batch[f"{stage}_mask"]
        return self._scored(model(batch.x, batch.edge_index)[mask], batch.y[mask], stage)

    def batch_size(self, batch) -> int:
        return 1  # one graph: epoch metrics are the full-batch values


@register_task("graph-classification")
class GraphClassificationTask(_MulticlassTask):
    """Mini-batches of graphs (a PyG ``Batch``); one label per graph."""

    def step(self, model, batch, stage):
        return self._scored(model(batch.x, batch.edge_index, batch.batch), batch.y, stage)

    def batch_size(self, batch) -> int:
        return int(batch.num_graphs)
