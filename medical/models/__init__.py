"""The medical model families, one per module.

Importing this package imports none of them: :mod:`hub.core.registry` imports the one module a family needs (as
``hub/index.json`` says), or every module of the package when all are needed.
"""
