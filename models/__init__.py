"""Example NumPyro models: each file has ``model(...)`` and ``load_data(...)``."""
