"""Console entry point. It imports the CLI inside its own handler, so that a Ctrl-C even during
start-up (heavy imports) ends with one line and exit 130, not a traceback."""

from __future__ import annotations

import sys

EXIT_INTERRUPTED = 130


def main() -> int:
    try:
        from .cli import main as run

        return run()
    except KeyboardInterrupt:
        print("partition: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
