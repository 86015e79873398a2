"""``python -m partition`` runs the CLI."""

import sys

from ._entry import main

sys.exit(main())
