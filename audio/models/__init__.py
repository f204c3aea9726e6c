"""The audio model families, one per module (importing registers them)."""
from audio.models import ast, ssast, timbre  # noqa: F401  (registers the families)
