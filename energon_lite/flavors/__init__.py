"""Datasets beyond WebDataset: robot episodes (HDF5), ..."""
