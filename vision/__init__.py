"""Vision models (timm architectures and the core's attention layers) and image data."""
from vision import data, explain, io, kinds, models, shapes, tasks  # noqa: F401  (registers models, datasets, kinds)
