"""``python -m energon_lite.cli``: the same as the ``energon-lite`` command."""

import sys

from energon_lite.cli.main import main

sys.exit(main())
