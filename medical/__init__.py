"""Medical models of the hub: multimodal survival fusion (image tiles, genes, clinical) with Cox losses,
the DeepSurv MLP baseline, the DeepSurv benchmark sets and user survival tables."""
from medical import deepsurv_mlp, survival_data, survival_fusion, survival_task  # noqa: F401  (registers)
