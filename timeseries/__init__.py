"""Time-series models: remaining-useful-life forecasting on NASA C-MAPSS (attention over cycles and
sensors, attention GRU), the TESTAM traffic mixture of experts with a GRU baseline, laser degradation paths, heart
rate from wrist PPG and the accelerometer (PULSE), and the user sensor-CSV, degradation, recording and traffic-folder
inputs."""
# The modules whose import registers this domain's entries, imported by hub.core.registry on first use; a model
# family alone imports only `models`, so that loading a model for inference imports no training data code.
REGISTERS = ("baselines", "data", "explain", "io", "kinds", "models", "tasks")
