"""Time-series models: remaining-useful-life forecasting on NASA C-MAPSS (attention over cycles and
sensors, attention GRU) and the user sensor-CSV adapters."""
from timeseries import attention_gru, rul_attention, rul_data, rul_task, sensor_csv  # noqa: F401  (registers)
