"""Tabular models of the hub: TabR, TabTransformer, TabM, an MLP baseline and CARTE (rows as graphs of their
cells); preprocessing fitted on the training split and saved with the model (JSON); scikit-learn's sets, Adult,
California Housing, Churn Modelling, the CARTE repository's tables and any CSV."""
# The modules whose import registers this domain's entries, imported by hub.core.registry on first use; a model
# family alone imports only `models`, so that loading a model for inference imports no training data code.
REGISTERS = ("baselines", "data", "explain", "io", "kinds", "models")
