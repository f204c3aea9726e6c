"""Training and testing runs on PyTorch Lightning, one role per module:

- :mod:`hub.run.module`: :class:`~hub.run.module.HubModule` (a hub model with its task, optimiser and schedule) and
  :func:`~hub.run.module.seed_all`;
- :mod:`hub.run.callbacks`: what plugs into the fitting trainer (atomic checkpoints, EMA, ``metrics.csv``, the joint
  improvement rule);
- :mod:`hub.run.folder`: the run folder and the files written in it;
- :mod:`hub.run.tracking`: the loggers of ``trainer.loggers`` (TensorBoard, MLflow) under the run folder;
- :mod:`hub.run.train`: :func:`~hub.run.train.train` a recipe into a run folder (resume, data parallelism);
- :mod:`hub.run.evaluate`: :func:`~hub.run.evaluate.evaluate` a tag or run folder, and
  :func:`~hub.run.evaluate.card_data`.
"""
