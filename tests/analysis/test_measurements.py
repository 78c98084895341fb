"""kvlab.analysis.measurements on the CPU with tiny sizes: the rows' structure, units and byte counts
(the figures themselves are not asserted), JSON storage, the benchmark script's storing rule;
and the same on CUDA where there is one."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from datetime import date
from pathlib import Path

import pytest
import torch
from bounds import HANG_S

from kvlab.analysis.measurements import (
    device_info,
    device_slug,
    load_measurements,
    page_index_copy,
    paged_read,
    pool_allocation,
    save_measurements,
)
from kvlab.core.page_index import max_blocks_per_seq

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_measurements.py"


def test_device_info_on_cpu_names_versions_and_date_but_no_host():
    info = device_info("cpu")
    assert {"name", "device_type", "driver", "cuda", "torch", "date"} <= set(info)
    assert info["device_type"] == "cpu" and info["torch"] == torch.__version__
    assert date.fromisoformat(info["date"])
    assert socket.gethostname() not in json.dumps(info)


@pytest.mark.parametrize(
    "name, slug",
    [
        ("NVIDIA H200", "h200"),
        ("NVIDIA H200 NVL", "h200-nvl"),
        ("NVIDIA GeForce RTX 5080", "geforce-rtx-5080"),
        ("x86_64", "x86-64"),
        ("", "device"),
    ],
)
def test_device_slug(name, slug):
    assert device_slug(name) == slug


def test_page_index_copy_counts_the_table_bytes_of_each_width_and_batch():
    seq_lens, batches = [2048, 8192, 32768, 131072, 1048576], [1, 3]
    rows = page_index_copy(seq_lens, batches, repeat=2)
    assert [(r["max_seq_len"], r["max_batch_size"]) for r in rows] == [
        (s, b) for s in seq_lens for b in batches
    ]
    assert sorted({r["width"] for r in rows}) == [68, 260, 1028, 4100, 32772]
    for r in rows:
        assert r["width"] == max_blocks_per_seq(r["max_seq_len"], 32)
        assert r["slots"] == r["max_batch_size"] + 1
        assert r["nbytes"] == r["slots"] * 2 * r["width"] * 4  # K/V planes, int32
        assert 0 < r["min_us"] <= r["median_us"]
        assert r["gb_per_s"] == pytest.approx(r["nbytes"] / r["median_us"] / 1e3, rel=1e-2)
    by = {(r["width"], r["max_batch_size"]): r["nbytes"] for r in rows}
    assert by[(260, 1)] / by[(68, 1)] == 260 / 68  # the one-line fix's metadata, x3.8


def test_paged_read_moves_the_whole_pool_both_ways():
    rows = paged_read([64, 1024], pool_bytes=64 * 1024, repeat=2)
    assert [r["page_bytes"] for r in rows] == [64, 1024]
    for r in rows:
        assert r["num_pages"] == 64 * 1024 // r["page_bytes"]
        assert r["nbytes"] == r["num_pages"] * r["page_bytes"] == 64 * 1024
        for side in ("gather", "copy"):
            assert 0 < r[f"{side}_min_us"] <= r[f"{side}_median_us"]
            assert r[f"{side}_gb_per_s"] > 0
        assert r["gather_vs_copy"] == pytest.approx(
            r["copy_median_us"] / r["gather_median_us"], rel=1e-2
        )


def test_pool_allocation_rounds_to_whole_pages():
    rows = pool_allocation([4096, 10000], bytes_per_block=1024, repeat=2)
    assert [(r["nbytes"], r["num_blocks"]) for r in rows] == [(4096, 4), (9216, 9)]
    assert all(r["bytes_per_block"] == 1024 and 0 <= r["min_ms"] <= r["median_ms"] for r in rows)


def test_bad_arguments_name_the_parameter():
    with pytest.raises(TypeError, match="max_seq_lens must be a non-empty sequence of ints"):
        page_index_copy([], [1])
    with pytest.raises(ValueError, match=r"batch_sizes\[1\] must be in"):
        page_index_copy([2048], [1, 0])
    with pytest.raises(ValueError, match="repeat must be in"):
        page_index_copy([2048], [1], repeat=0)
    with pytest.raises(ValueError, match="device must be"):
        page_index_copy([2048], [1], device="tpu")
    with pytest.raises(ValueError, match=r"multiples of 8.*\[100\]"):
        paged_read([64, 100], pool_bytes=1024)
    with pytest.raises(ValueError, match=r"pool_bytes must be in \[1024,"):
        paged_read([1024], pool_bytes=512)
    with pytest.raises(ValueError, match=r"bytes_per_block must be in \[1, 100\]"):
        pool_allocation([100], bytes_per_block=1024)
    with pytest.raises(TypeError, match="pool_bytes must be a non-empty sequence"):
        pool_allocation(4096)


def test_save_and_load_round_trip(tmp_path):
    results = {
        "device": device_info(),
        "pool_allocation": pool_allocation([2048], bytes_per_block=1024),
    }
    path = save_measurements(results, tmp_path / "a" / "cpu.json")
    assert path.exists() and load_measurements(path) == results
    with pytest.raises(TypeError, match="results must be a mapping"):
        save_measurements([1], tmp_path / "b.json")
    (tmp_path / "list.json").write_text("[1]")
    with pytest.raises(ValueError, match="does not hold a JSON object"):
        load_measurements(tmp_path / "list.json")


def _run_script(*args):
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--device", "cpu", "--quick", *args],
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.splitlines()[-1])


def test_script_on_cpu_stores_only_where_told(tmp_path):
    assert _run_script()["stored"].startswith("not stored")
    line = _run_script("--out", str(tmp_path / "cpu.json"))
    assert line["stored"] == str(tmp_path / "cpu.json")
    stored = load_measurements(tmp_path / "cpu.json")
    assert set(stored) == {
        "device",
        "paged_attention_check",
        "page_index_copy",
        "paged_read",
        "pool_allocation",
        "pool_vs_workspace",
        "seconds",
    }
    assert stored["device"]["device_type"] == "cpu"
    assert stored["pool_vs_workspace"] == []  # it needs CUDA (torch.cuda.mem_get_info)
    assert stored["paged_attention_check"]["max_abs_error"] <= 1e-3
    assert len(stored["page_index_copy"]) == 4 and len(stored["paged_read"]) == 2


@pytest.mark.gpu
@pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="torch.cuda.is_available() is False: no CUDA GPU on this machine",
)
def test_measurements_on_cuda():
    info = device_info("cuda")
    assert info["device_type"] == "cuda" and info["cuda"] and info["compute_capability"]
    rows = page_index_copy([2048, 8192], [1, 64], device="cuda", repeat=3)
    assert all(r["nbytes"] == r["slots"] * 2 * r["width"] * 4 and r["median_us"] > 0 for r in rows)
    reads = paged_read([4096], pool_bytes=1 << 24, device="cuda", repeat=3)
    assert reads[0]["gather_gb_per_s"] > 0 and reads[0]["copy_gb_per_s"] > 0
    assert pool_allocation([1 << 24], device="cuda")[0]["median_ms"] > 0


# -- the stored GPU figures ----------------------------------------------------------------------


def test_the_stored_h200_figures_say_where_and_when_they_were_taken():
    from kvlab.analysis.measurements import measured_on

    h200 = load_measurements("h200")  # data/measurements/h200.json
    info = h200["device"]
    assert info["device_type"] == "cuda" and "H200" in info["name"]
    assert info["driver"] and info["cuda"] and info["torch"] and len(info["date"]) == 10
    assert measured_on(info).startswith("measured on NVIDIA H200 (driver ")
    # the figures are consistent with what they measure
    copies = {(r["width"], r["max_batch_size"]): r for r in h200["page_index_copy"]}
    assert {68, 260} <= {w for w, _ in copies}
    for (width, batch), r in copies.items():
        assert r["nbytes"] == (batch + 1) * 2 * width * 4
    big = max(b for _, b in copies)
    assert (
        copies[(260, big)]["median_us"] > copies[(68, big)]["median_us"]
    )  # the wider row costs more
    for r in h200["paged_read"]:
        assert 0 < r["gather_vs_copy"] <= 1.2 and r["copy_gb_per_s"] > 100  # HBM, not PCIe
    blocks = [r["pool_blocks"] for r in h200["pool_vs_workspace"]]
    assert len(blocks) >= 3 and blocks == sorted(blocks, reverse=True) and blocks[0] > blocks[-1]


def test_load_measurements_by_name_says_what_is_known():
    with pytest.raises(ValueError, match=r"no measurements named 'nope'; known: \[.*'h200'"):
        load_measurements("nope")


@pytest.mark.parametrize(
    "path, error, text",
    [
        (0, TypeError, "path must be a str or PathLike, got 0"),
        (None, TypeError, "path must be a str or PathLike"),
        ("", ValueError, "path takes one of these names, or a .json file's path"),
    ],
)
def test_load_measurements_names_a_bad_path(path, error, text):
    with pytest.raises(error) as info:
        load_measurements(path)
    assert text in str(info.value)
