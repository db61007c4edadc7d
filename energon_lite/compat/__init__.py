"""Energon-only names and argument forms over energon_lite's loader: the public entry points
that take Energon's older arguments (``arguments``), dataset factories, the joined factory,
the metadataset API classes and ``SavableDataLoader``."""
