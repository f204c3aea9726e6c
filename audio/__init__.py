"""Audio models (AST, SSAST, the timbre classifier) and audio data (FSDD, user audio folders)."""
from audio import ast, datasets, explain, ssast, timbre  # noqa: F401  (registers models, datasets, adapters)
