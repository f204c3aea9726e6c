"""The time-series model families, one per module (importing registers them)."""
from timeseries.models import (  # noqa: F401  (registers the families)
    attention_gru,
    degradation_gru,
    pulse,
    rul_attention,
    testam,
    traffic_gru,
)
