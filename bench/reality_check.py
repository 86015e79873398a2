"""Reality check: solve with costs measured on this CPU, export 2 stages, run them, compare.

For each model: op times and the inter-process link are measured (``partition.reality``), the
order DP splits the model over two cores, ``partition export`` writes the stages and
``partition run --compare`` runs them (one process per core, one thread each), re-measures
the op times and prints predicted against measured throughput. Prints a markdown table.

    .venv/bin/python bench/reality_check.py [--microbatches 16] [--out /tmp/reality] [MODEL ...]

MODEL is a light_* name from onnx's bundled models, a zoo model in ``models/`` (e.g. ``gpt2``,
``bert_base``; absent weights are filled randomly) or ``transformer`` (built with onnx.helper).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import onnx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from onnx_builders import transformer_model  # noqa: E402

from partition import solve  # noqa: E402
from partition.cli import main  # noqa: E402
from partition.jsonio import dumps  # noqa: E402
from partition.reality import measured_instance  # noqa: E402
from partition.report import result_json  # noqa: E402

LIGHT = Path(os.path.dirname(onnx.__file__)) / "backend" / "test" / "data" / "light"
DEFAULT = ["light_resnet50", "light_inception_v1", "light_squeezenet", "light_densenet121", "transformer"]


def _model(name: str, folder: Path) -> Path:
    if name == "transformer":
        path = folder / "transformer.onnx"
        onnx.save(transformer_model(layers=4, width=256, sequence=128, vocabulary=2000), path)
        return path
    if (ROOT / "models" / f"{name}.onnx").is_file():  # a zoo export: absent weights filled randomly
        return ROOT / "models" / f"{name}.onnx"
    return LIGHT / f"{name}.onnx"


def check(name: str, folder: Path, microbatches: int) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    model = _model(name, folder)
    instance = measured_instance(model, 2)
    result = solve(instance)
    (folder / "placement.json").write_text(dumps(result_json(instance, result)))
    (folder / "cluster.json").write_text(dumps(instance.cluster.to_json()))
    (folder / "instance.json").write_text(dumps(instance.to_json()))  # for `partition evaluate`
    stages, report = folder / "stages", folder / "run.json"
    common = ["-q", "--force"]
    export = ["export", str(model), str(folder / "placement.json"), "--cluster", str(folder / "cluster.json")]
    assert main([*export, "-o", str(stages), *common]) == 0
    run = ["run", str(stages), "-m", str(microbatches), "--compare", str(folder / "placement.json")]
    code = main([*run, "-o", str(report), *common])
    document = json.loads(report.read_text())
    throughput = document["comparison"]["throughput"]
    return {
        "model": name,
        "ops": len(instance.graph.ops),
        "split": "/".join(
            str(len(s["ops"])) for s in json.loads((folder / "placement.json").read_text())["stages"]
        ),
        "predicted": throughput["predicted_per_s"],
        "measured": throughput["measured_per_s"],
        "error": throughput["relative_error"],
        "cpu": throughput["measured_cpu_per_s"],
        "cpu_error": throughput["relative_error_cpu"],
        "stage_bound": 1.0 / max(stage["time_s"] for stage in document["stages"]),
        "max_abs_diff": max(document["outputs"]["max_abs_diff"].values()),
        "match": document["outputs"]["match"] and code == 0,
        "load": os.getloadavg()[0],
    }


def main_() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=DEFAULT)
    parser.add_argument("--microbatches", type=int, default=16)
    parser.add_argument("--out", default="/tmp/partition-reality")
    args = parser.parse_args()
    rows = [check(name, Path(args.out) / name, args.microbatches) for name in args.models]
    print(
        "| model | ops | ops per stage | predicted /s | measured /s | error | 1/slowest stage /s"
        " | cpu-only /s | error | max abs diff | outputs | load avg |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['model']} | {r['ops']} | {r['split']} | {r['predicted']:.3g} | {r['measured']:.3g} |"
            f" {r['error']:+.1%} | {r['stage_bound']:.3g} | {r['cpu']:.3g} | {r['cpu_error']:+.1%} |"
            f" {r['max_abs_diff']:.2g} | {'match' if r['match'] else 'DIFFER'} | {r['load']:.1f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main_())
