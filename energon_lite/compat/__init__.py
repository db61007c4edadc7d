"""Energon-only names and argument forms over energon_lite's loader: dataset factories, the
joined factory, the metadataset API classes and ``SavableDataLoader``."""
