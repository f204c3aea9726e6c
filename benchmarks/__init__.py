"""Benchmarks of Attention Hub, run from the root of a source checkout as ``python -m benchmarks.NAME``.

Not installed with the hub (``pyproject.toml`` packages only the library). :mod:`benchmarks.timing` holds the
timing and memory measurement every script uses, :mod:`benchmarks.references` the reference implementations the
hub's models are compared with, :mod:`benchmarks.report` the report of ``attnhub bench``. Scripts write their
tables under ``benchmarks/results/``; dated experiment notes live in ``docs/experiments/``.
"""
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the checkout: recipes/ lies here
RESULTS = ROOT / "benchmarks" / "results"
