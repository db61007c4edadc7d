"""Making batches: collate rules (stack, pad-stack, list, Energon's recursing forms), the
shared-memory segments a worker reuses for its batches, and slabs that images decode into."""
