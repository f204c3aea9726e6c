"""Medical models of the hub: multimodal survival fusion (image tiles, genes, clinical) with Cox losses,
the DeepSurv MLP baseline, the DeepSurv benchmark sets and user survival tables; TFCAM and a masked GRU
on PhysioNet 2012 ICU stays."""
# The modules whose import registers this domain's entries, imported by hub.core.registry on first use; a model
# family alone imports only `models`, so that loading a model for inference imports no training data code.
REGISTERS = ("explain", "icu_data", "io", "kinds", "models", "survival_data", "tasks")
