"""Non-attention layers shared by more than one domain (attention layers live in :mod:`hub.attention`).

Like the attention core, this package imports only torch and :mod:`hub.errors`; every layer takes its
dimensions explicitly.
"""
from hub.layers.batch_ensemble import LinearBatchEnsemble, MemberHeads
from hub.layers.periodic_embeddings import PeriodicEmbeddings

__all__ = ["LinearBatchEnsemble", "MemberHeads", "PeriodicEmbeddings"]
