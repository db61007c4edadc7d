"""Loader state as data: the msgpack codec with its digest and shape checks, and the restore
keys that name where an item came from. Imports only the core modules."""
