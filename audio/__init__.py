"""Audio models (AST, SSAST, the timbre classifier) and audio data (FSDD, user audio folders)."""
from audio import data, explain, io, kinds, models, tasks  # noqa: F401  (registers models, datasets, tasks, kinds)
