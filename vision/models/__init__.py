"""The vision model families, one per module (importing registers them)."""
from vision.models import (  # noqa: F401  (registers the families)
    airbench_cbam,
    airbench_halo,
    cct,
    coat,
    halonet,
    patchconvnet,
    residual_attention,
    resnet_cbam,
    slot_autoencoder,
    vit,
)
