"""Datasets and loaders: ``get_train_dataset`` and friends, the dataset a worker runs, the
loader that keeps per-worker states, and what rides along (transport checks, watchdog, stats)."""
