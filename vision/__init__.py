"""Vision models (timm architectures and the core's attention layers) and image data."""
from vision import cifar, coat, datasets, explain, halonet, object_discovery, resnet_cbam, shapes, slot_autoencoder, vit  # noqa: F401  (registers models, datasets, adapters)
