"""The vision model families, one per module (importing registers them)."""
from vision.models import coat, halonet, resnet_cbam, slot_autoencoder, vit  # noqa: F401  (registers the families)
