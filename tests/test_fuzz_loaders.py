"""Fuzz the JSON and ONNX loaders: any input either loads or raises a PartitionError.

``make test`` runs a few dozen examples each; ``make fuzz`` sets PARTITION_FUZZ_EXAMPLES for
thousands. Mutations start from valid files so that they reach deep into the parsers.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
from pathlib import Path

import onnx
from conftest import LIGHT
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import partition
from partition.onnx_import import import_onnx

EXAMPLES = int(os.environ.get("PARTITION_FUZZ_EXAMPLES", "40"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
SQUEEZENET = (LIGHT / "light_squeezenet.onnx").read_bytes()
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-10, 10**12) | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)


def _valid_instance_document() -> dict:
    instance = partition.make_instance(str(LIGHT / "light_squeezenet.onnx"), "hetero-2h100-4a100-2l4", 3)
    return instance.to_json()


BASE = _valid_instance_document()


def _paths(document, prefix=()):
    yield prefix
    if isinstance(document, dict):
        for key, value in list(document.items())[:12]:
            yield from _paths(value, (*prefix, key))
    elif isinstance(document, list):
        for index, value in enumerate(document[:3]):
            yield from _paths(value, (*prefix, index))


PATHS = [p for p in _paths(BASE) if p]


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(PATHS), JSON_VALUES, st.booleans()), min_size=1, max_size=3))
def test_instance_loader_never_crashes(mutations) -> None:
    document = copy.deepcopy(BASE)
    for path, value, delete in mutations:
        target = document
        try:
            for key in path[:-1]:
                target = target[key]
            if delete:
                del target[path[-1]]
            else:
                target[path[-1]] = value
        except (KeyError, IndexError, TypeError):
            continue
    try:
        instance = partition.parse_instance(json.loads(json.dumps(document)))
    except partition.PartitionError:
        return
    result = partition.solve(instance, "order-dp")
    if result.placement is not None:
        assert partition.evaluate(instance, result.placement).valid


@FUZZ
@given(
    st.dictionaries(
        st.sampled_from(
            ["name", "hosts", "inter_host_link", "device_types", "link_types", "version", "schema"]
        ),
        JSON_VALUES,
        max_size=5,
    )
)
def test_cluster_loader_never_crashes(document) -> None:
    with contextlib.suppress(partition.PartitionError):
        partition.parse_cluster(document)


@FUZZ
@given(
    st.lists(st.tuples(st.integers(0, len(SQUEEZENET) - 1), st.integers(0, 255)), min_size=1, max_size=8),
    st.integers(64, len(SQUEEZENET)),
)
def test_onnx_loader_never_crashes(tmp_path_factory, flips, length) -> None:
    data = bytearray(SQUEEZENET[:length])
    for position, value in flips:
        if position < len(data):
            data[position] = value
    path = Path(tmp_path_factory.mktemp("fuzz")) / "mutant.onnx"
    path.write_bytes(bytes(data))
    try:
        graph = import_onnx(path)
    except partition.PartitionError:
        return
    assert len(graph.ops) > 0


def test_valid_model_still_loads() -> None:
    assert len(import_onnx(onnx.load_from_string(SQUEEZENET)).ops) == 66
