"""Medical models of the hub: multimodal survival fusion (image tiles, genes, clinical) with Cox losses,
the DeepSurv MLP baseline, the DeepSurv benchmark sets and user survival tables; TFCAM and a masked GRU
on PhysioNet 2012 ICU stays."""
# Importing registers the models, datasets and adapters.
from medical import (  # noqa: F401
    deepsurv_mlp,
    icu_data,
    icu_gru,
    survival_data,
    survival_fusion,
    survival_task,
    tfcam,
    tfcam_explain,
)
