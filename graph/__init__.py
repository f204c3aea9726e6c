"""graph models of the hub: GAT, GATv2 and CAT node classifiers on citation and user graphs, and a
GAT graph classifier with a Set Transformer (PMA) readout."""
from graph import data, explain, io, kinds, models, tasks  # noqa: F401  (registers models, data, tasks, kinds)
