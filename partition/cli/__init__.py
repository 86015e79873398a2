"""The ``partition`` command: one module per verb, each registering its own sub-parser.

Every user error is a :class:`~partition.errors.PartitionError` printed as one line with a
non-zero exit; results go to stdout or ``-o``, progress and tables to stderr.

The verbs that execute or write models (``export``, ``profile``, ``run``) import the modules
that need onnx and onnxruntime inside their ``run``: those take most of a second to import
(ml_dtypes), which every other verb, ``--help`` included, would otherwise pay at start-up.
Likewise the solvers' modules (with ortools and pulp) load only when a solver runs
(:mod:`partition.solvers`).
"""

from __future__ import annotations

import argparse
import logging
import sys

from ..errors import PartitionError
from . import (
    bench_cmd,
    calibrate_cmd,
    compare_cmd,
    evaluate_cmd,
    export_cmd,
    import_cmd,
    inspect_cmd,
    instance_cmd,
    profile_cmd,
    run_cmd,
    show_cmd,
    solve_cmd,
)

_VERBS = (
    solve_cmd,
    evaluate_cmd,
    inspect_cmd,
    instance_cmd,
    import_cmd,
    profile_cmd,
    calibrate_cmd,
    bench_cmd,
    show_cmd,
    compare_cmd,
    export_cmd,
    run_cmd,
)
EXIT_ERROR = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="partition",
        description="Split an ONNX model into pipeline stages over a (heterogeneous) cluster,"
        " minimising the bottleneck stage time, with a proven lower bound.",
    )
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="COMMAND")
    for verb in _VERBS:
        verb.register(verbs)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.ERROR if getattr(args, "quiet", False) else logging.WARNING,
        format="partition: warning: %(message)s",
        stream=sys.stderr,
    )
    try:
        return int(args.run(args) or 0)
    except PartitionError as error:
        print(f"partition: error: {error}", file=sys.stderr)
        return EXIT_ERROR
    except OSError as error:
        print(f"partition: error: {error.filename or ''}: {error.strerror or error}", file=sys.stderr)
        return EXIT_ERROR
