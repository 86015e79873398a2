"""Link calibration from measured transfers: the fit, the cluster it writes, refused input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from partition.cli import main
from partition.cluster import load_cluster
from partition.errors import InputError
from partition.link_calibration import Transfer, fit_link, parse_transfer


def test_two_sizes_give_the_line_through_both() -> None:
    # 10 µs latency, 10 GB/s: 4096 B → 10.4096 µs, 16 MiB → 1.6877216 ms
    link = fit_link([Transfer(16777216, 10e-6 + 16777216 / 10e9), Transfer(4096, 10e-6 + 4096 / 10e9)], "l")
    assert link.latency == pytest.approx(10e-6, rel=1e-9)
    assert link.bandwidth == pytest.approx(10e9, rel=1e-9)


def test_negative_intercept_becomes_a_line_through_the_origin() -> None:
    # time grows faster than linearly: the unconstrained intercept is negative
    link = fit_link([Transfer(1000, 1e-6), Transfer(2000, 4e-6), Transfer(3000, 9e-6)], "l")
    assert link.latency == 0.0
    slope = (1000 * 1e-6 + 2000 * 4e-6 + 3000 * 9e-6) / (1000**2 + 2000**2 + 3000**2)
    assert link.bandwidth == pytest.approx(1 / slope)


@pytest.mark.parametrize(
    ("measurements", "message"),
    [
        (["4096:2e-5"], "at least two different sizes"),
        (["4096:2e-5", "4096:3e-5"], "at least two different sizes"),
        (["4096:2e-5", "8192:3e-5", "8192:4e-5"], "given twice"),
        (["4096:2e-5", "8192:1e-5"], "times must increase with size"),
        (["4096:-2e-5", "8192:1e-5"], "time must be a positive finite number"),
        (["0:2e-5", "8192:1e-5"], "size must be a positive finite number"),
        (["4096:nan", "8192:1e-5"], "positive finite"),
        (["4096", "8192:1e-5"], "expected BYTES:SECONDS"),
        (["4096:fast", "8192:1e-5"], "expected BYTES:SECONDS"),
    ],
)
def test_nonsense_measurements_are_refused(measurements: list[str], message: str) -> None:
    with pytest.raises(InputError, match=message):
        fit_link([parse_transfer(m) for m in measurements], "l")


@pytest.mark.parametrize("scope", ["intra", "inter"])
def test_cli_writes_a_cluster_with_the_calibrated_link(tmp_path: Path, scope: str) -> None:
    output = tmp_path / "cluster.json"
    measured = ["4096:2.1e-5", "16777216:1.3e-3"]
    assert (
        main(
            [
                "calibrate",
                "--link",
                scope,
                *measured,
                "--cluster",
                "hetero-2h100-4a100-2l4",
                "-o",
                str(output),
            ]
        )
        == 0
    )
    cluster = load_cluster(output)
    original = load_cluster("hetero-2h100-4a100-2l4")
    expected = fit_link([parse_transfer(m) for m in measured], f"measured-{scope}")
    slope = (1.3e-3 - 2.1e-5) / (16777216 - 4096)
    assert expected.bandwidth == pytest.approx(1 / slope) and expected.latency == pytest.approx(
        2.1e-5 - 4096 * slope
    )
    changed = [cluster.inter_host_link] if scope == "inter" else [h.intra_link for h in cluster.hosts]
    kept = [h.intra_link for h in cluster.hosts] if scope == "inter" else [cluster.inter_host_link]
    for link in changed:  # the JSON keeps 12 significant digits
        assert link.name == expected.name
        assert (link.bandwidth, link.latency) == pytest.approx(
            (expected.bandwidth, expected.latency), rel=1e-10
        )
    assert kept == (
        [h.intra_link for h in original.hosts] if scope == "inter" else [original.inter_host_link]
    )
    assert cluster.devices == original.devices
    assert json.loads(output.read_text())["link_types"][f"measured-{scope}"]["latency"] > 0


def test_cli_link_errors_are_one_line(tmp_path: Path, capsys) -> None:
    cases = [
        ["--link", "sideways", "4096:2e-5", "8192:3e-5", "--cluster", "homo-4a100"],
        ["--link", "intra", "4096:2e-5", "8192:3e-5"],  # no cluster
        ["--link", "intra", "4096:2e-5", "--cluster", "homo-4a100"],
        ["--link", "intra", "4096:3e-5", "8192:2e-5", "--cluster", "homo-4a100"],
    ]
    for case in cases:
        assert main(["calibrate", *case]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("partition: error:") and "\n" not in err
