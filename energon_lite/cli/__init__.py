"""``energon-lite``: the command line (prepare, info, preview, lint, checkpoint, demo)."""

from energon_lite.cli.main import main

__all__ = ["main"]
