"""Reading placement files back for ``show`` and ``compare``."""

from __future__ import annotations

import argparse

from ..instance import Instance
from ..jsonio import read_json
from ..placement_view import PlacementView, reevaluate, view_of
from ..report import result_json
from ._common import add_problem, adopt_recorded_options, load_problem


def add_instance_source(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--instance",
        metavar="INSTANCE.json|MODEL.onnx",
        help="re-evaluate on this instance (an ONNX model needs --cluster) instead of trusting the file",
    )
    parser.add_argument("--cluster", metavar="C.json|NAME", help="cluster, with an ONNX model as --instance")


def load_view(path: str, source: str | None, cluster: str | None) -> tuple[PlacementView, Instance | None]:
    """The placement file as a view, re-evaluated on the instance when one is given."""
    document = read_json(path, "placement")
    if source is None:
        return view_of(document, path), None
    parser = argparse.ArgumentParser(add_help=False)  # every option of the shared problem parser
    add_problem(parser, stages_required=False)
    args = parser.parse_args([source, *(["--cluster", cluster] if cluster else [])])
    adopt_recorded_options(args, document)
    args.exact_stages = bool(document.get("instance", {}).get("exact_stages"))
    instance = load_problem(args, default_stages=1)
    return view_of(result_json(instance, reevaluate(instance, document, path)), path), instance
