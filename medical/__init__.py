"""Medical models of the hub: multimodal survival fusion (image tiles, genes, clinical) with Cox losses,
the DeepSurv MLP baseline, the DeepSurv benchmark sets and user survival tables; TFCAM and a masked GRU
on PhysioNet 2012 ICU stays."""
from medical import (deepsurv_mlp, icu_data, icu_gru, survival_data, survival_fusion, survival_task,  # noqa: F401
                     tfcam, tfcam_explain)  # (importing registers the models, datasets and adapters)
