"""Tabular models of the hub: TabR, TabTransformer, TabM and an MLP baseline; preprocessing fitted on the
training split and saved with the model (JSON); scikit-learn's sets, Adult, California Housing, Churn
Modelling and any CSV."""
from tabular import baselines, data, explain, io, kinds, models  # noqa: F401  (registers)
