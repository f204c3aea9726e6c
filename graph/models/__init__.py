"""The graph model families, one per module (importing registers them)."""
from graph.models import gat, gat_pma  # noqa: F401  (registers the families)
