"""The tabular model families, one per module, and their shared layers (``layers``); importing registers them."""
from tabular.models import carte, mlp, tab_transformer, tabm, tabr  # noqa: F401  (registers the families)
