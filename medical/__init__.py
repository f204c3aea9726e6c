"""Medical models of the hub: multimodal survival fusion (image tiles, genes, clinical) with Cox losses,
the DeepSurv MLP baseline, the DeepSurv benchmark sets and user survival tables; TFCAM and a masked GRU
on PhysioNet 2012 ICU stays."""
from medical import explain, icu_data, io, kinds, models, survival_data, tasks  # noqa: F401  (registers models, datasets, tasks, kinds)
