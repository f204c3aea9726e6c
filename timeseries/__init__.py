"""Time-series models: remaining-useful-life forecasting on NASA C-MAPSS (attention over cycles and
sensors, attention GRU), the TESTAM traffic mixture of experts with a GRU baseline, and the user
sensor-CSV and traffic-folder adapters."""
# Importing registers the models, datasets and tasks.
from timeseries import (  # noqa: F401
    attention_gru,
    rul_attention,
    rul_data,
    rul_forecast,
    rul_task,
    sensor_csv,
    testam,
    testam_routing,
    traffic_csv,
    traffic_data,
    traffic_gru,
)
