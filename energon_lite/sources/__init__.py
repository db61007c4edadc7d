"""Where samples come from: the ``Source`` protocol the reader needs, the registry of dataset
kinds that opens a path a user gives, and ``Leaf`` (one dataset of a blend)."""
