"""Core demos: small generated tasks and models of the attention core (registry domain ``"core"``).

Kept out of :mod:`hub.attention` so that the core stays a leaf (torch, PyG and :mod:`hub.errors` only);
these modules use the library (data modules, tasks, registry) and are imported by the registry on first use.
"""
