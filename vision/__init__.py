"""Vision models (timm architectures and the core's attention layers) and image data."""
# The modules whose import registers this domain's entries, imported by hub.core.registry on first use; a model
# family alone imports only `models`, so that loading a model for inference imports no training data code.
REGISTERS = ("data", "explain", "io", "kinds", "models", "shapes", "tasks")
