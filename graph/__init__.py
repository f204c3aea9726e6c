"""graph models of the hub: GAT, GATv2 and CAT node classifiers on citation and user graphs, and a
GAT graph classifier with a Set Transformer (PMA) readout."""
# The modules whose import registers this domain's entries, imported by hub.core.registry on first use; a model
# family alone imports only `models`, so that loading a model for inference imports no training data code.
REGISTERS = ("data", "explain", "io", "kinds", "models", "tasks")
