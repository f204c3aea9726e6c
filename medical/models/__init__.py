"""The medical model families, one per module (importing registers them)."""
from medical.models import biofusionnet, deepsurv_mlp, icu_gru, survival_fusion, tfcam  # noqa: F401  (registers the families)
