"""``partition bench``: every solver over a set of instances, into CSV, JSON and Markdown."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from .. import bench
from ..api import usable_cores
from ..errors import InputError
from ..solvers import solver_names
from ._common import add_gap_limit

DEFAULT_INSTANCES = Path("instances/v1")


def register(verbs: argparse._SubParsersAction) -> None:
    parser = verbs.add_parser(
        "bench",
        help="benchmark solvers over instance files; write tables and a summary",
        fromfile_prefix_chars="@",
    )
    parser.add_argument(
        "instances",
        nargs="*",
        metavar="INSTANCE",
        help="instance files (.json or .json.gz), directories (searched recursively), glob"
        " patterns, peer profiles imported at run time as FORMAT:PROFILE@CLUSTER:K[,K...]"
        " (e.g. pipedream:graph.txt@homo-4a100:4,8), or @LIST (a file of such arguments, one a"
        f" line) (default: ./{DEFAULT_INSTANCES}/)",
    )
    parser.add_argument(
        "--solvers",
        metavar="A,B",
        help=f"comma-separated solver names, or auto (default: all registered: {', '.join(solver_names())})",
    )
    parser.add_argument(
        "--time-limit", type=float, default=30.0, metavar="S", help="seconds per job (default 30)"
    )
    parser.add_argument(
        "--jobs",
        "-j",
        type=int,
        default=usable_cores(),
        metavar="N",
        help="parallel jobs (default: the usable cores)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        metavar="N",
        help="solver threads per job (default: the usable cores over the jobs, at least 1;"
        " keep jobs × threads within the cores)",
    )
    add_gap_limit(parser)
    parser.add_argument(
        "-o",
        "--output",
        default="bench-results",
        metavar="DIR",
        help="output directory (default bench-results)",
    )
    parser.add_argument("--force", action="store_true", help="overwrite existing result files")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bar or summary on stderr")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    sources = args.instances or [DEFAULT_INSTANCES]
    if not args.instances and not DEFAULT_INSTANCES.is_dir():
        raise InputError(f"no instances given and ./{DEFAULT_INSTANCES}/ does not exist")
    solvers = bench.check_solvers(args.solvers.split(",") if args.solvers else solver_names())
    entries = bench.collect(sources)
    bench.check_outputs(args.output, args.force)
    threads = max(1, usable_cores() // max(args.jobs, 1)) if args.threads is None else args.threads
    results = bench.run(
        entries,
        solvers,
        time_limit=args.time_limit,
        jobs=args.jobs,
        threads=threads,
        gap_limit=args.gap_limit,
        progress=not args.quiet,
        command=" ".join(
            [
                "partition bench",
                shlex.join(map(str, sources))
                if len(sources) <= 4
                else f"<{len(sources)} sources: see results.json>",
                f"--solvers {','.join(solvers)} --time-limit {args.time_limit:g} --jobs {args.jobs}"
                f" --threads {threads}" + (f" --gap-limit {args.gap_limit:g}" if args.gap_limit else ""),
            ]
        ),
    )
    paths = bench.write(results, args.output, force=args.force)
    if not args.quiet:
        print(bench.summary_markdown(results).split("## Per instance")[0].rstrip(), file=sys.stderr)
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0
