"""The time-series model families, one per module (importing registers them)."""
from timeseries.models import attention_gru, degradation_gru, rul_attention, testam, traffic_gru  # noqa: F401  (registers the families)
