"""The built-in sample types (Energon's names and fields), one module each, so that a process
makes only the types it uses (making a slotted dataclass costs about as much as importing a
small module). Their public home is :mod:`energon_lite.samples.types`, which imports each on
first use; each class says so in its ``__module__``, so reprs and pickles name that path.
"""
