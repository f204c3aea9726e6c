"""The hub's core: the registry of families, tags and datasets (:mod:`hub.core.registry`, with the index it reads
first, :mod:`hub.core.index`), model cards (:mod:`hub.core.cards`) and weights checked by their sha256
(:mod:`hub.core.weights`)."""
