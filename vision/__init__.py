"""Vision models (timm architectures and the core's attention layers) and image data."""
from vision import datasets, vit  # noqa: F401  (registers models, datasets and adapters)
