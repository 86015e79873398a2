"""Console entry point. It imports the CLI inside its own handler, so that a Ctrl-C even during
start-up (heavy imports) ends with one line and exit 130, not a traceback. The signal is held
back while the imports run: one arriving inside an import's clean-up callback would otherwise
be reported by Python as an ignored exception, with its traceback."""

from __future__ import annotations

import signal
import sys

EXIT_INTERRUPTED = 130


def main() -> int:
    holding = hasattr(signal, "pthread_sigmask")
    try:
        if holding:
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            from .cli import main as run
        finally:
            if holding:  # a Ctrl-C that arrived meanwhile is raised from here, into the handler
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        return run()
    except KeyboardInterrupt:
        print("partition: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
