"""Time-series models: remaining-useful-life forecasting on NASA C-MAPSS (attention over cycles and
sensors, attention GRU), the TESTAM traffic mixture of experts with a GRU baseline, and the user
sensor-CSV and traffic-folder inputs."""
from timeseries import baselines, data, explain, io, kinds, models, tasks  # noqa: F401  (registers)
