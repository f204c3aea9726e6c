"""Vision models (timm architectures and the core's attention layers) and image data."""
from vision import cifar, coat, datasets, explain, halonet, resnet_cbam, vit  # noqa: F401  (registers models, datasets, adapters)
