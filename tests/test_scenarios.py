"""kvlab.scenarios: loading data/scenarios/*.yaml, and refusing broken files with clear errors."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import yaml

from kvlab.scenarios import (
    EXPECTED,
    SCENARIO_DIR,
    Scenario,
    ScenarioError,
    ScenarioParameters,
    list_scenarios,
    load_scenario,
)

RTX = SCENARIO_DIR / "rtx5080-4mib.yaml"


def test_loads_by_name_and_by_path():
    by_name = load_scenario("rtx5080-4mib")
    assert load_scenario(RTX) == by_name
    assert load_scenario(str(RTX)) == by_name
    assert isinstance(by_name, Scenario)
    assert isinstance(by_name.parameters, ScenarioParameters)
    assert by_name.name == "rtx5080-4mib"
    assert by_name.gpu == "RTX 5080"
    assert "#21470" in by_name.source and "1.4.0rc3.dev202610300406" in by_name.source
    p = by_name.parameters
    assert (p.pool_mib, p.num_layers, p.num_kv_heads, p.head_dim, p.kv_dtype, p.tokens_per_block) == \
        (4, 2, 2, 128, "float16", 32)
    assert (p.configured_max_seq_len, p.max_batch_size, p.context_length, p.model_weights_bytes) == \
        (8192, 1, 8192, 0)
    assert p.pool_bytes == 4 * 2**20


def test_scenario_is_frozen():
    sc = load_scenario("rtx5080-4mib")
    with pytest.raises(dataclasses.FrozenInstanceError):
        sc.parameters.pool_mib = 8
    with pytest.raises(dataclasses.FrozenInstanceError):
        sc.name = "other"


def test_list_scenarios_holds_every_file_and_each_loads():
    names = list_scenarios()
    assert "rtx5080-4mib" in names
    assert names == sorted(p.stem for p in SCENARIO_DIR.glob("*.yaml"))
    for name in names:
        assert load_scenario(name).name == name


@pytest.mark.parametrize("name", list_scenarios())
def test_every_expected_value_is_a_named_int(name):
    expected = load_scenario(name).expected
    assert expected
    for key, value in expected.items():
        assert key in EXPECTED
        assert type(value) is int, (key, value)


def test_rtx_expected_values_follow_from_the_parameters():
    """The seed's arithmetic, done here by hand (independently of kvlab's modules)."""
    sc = load_scenario("rtx5080-4mib")
    p, e = sc.parameters, sc.expected
    bytes_per_token = p.num_layers * 2 * p.num_kv_heads * p.head_dim * 2  # K and V, fp16
    total_blocks = p.pool_bytes // (bytes_per_token * p.tokens_per_block)
    capacity = total_blocks * p.tokens_per_block

    def width(seq_len):  # +1 decode token, rounded up to a multiple of 4
        return 4 * math.ceil(math.ceil((seq_len + 1) / p.tokens_per_block) / 4)

    assert e == {
        "bytes_per_token": bytes_per_token,
        "capacity_tokens": capacity,
        "total_blocks": total_blocks,
        "width_clamped": width(min(capacity, p.configured_max_seq_len)),
        "width_configured": width(p.configured_max_seq_len),
        "entries_needed": math.ceil(p.context_length / p.tokens_per_block),
    }
    assert e == {"bytes_per_token": 2048, "capacity_tokens": 2048, "total_blocks": 64,
                 "width_clamped": 68, "width_configured": 260, "entries_needed": 256}


# --- broken files --------------------------------------------------------------------------------


def _good() -> dict:
    return yaml.safe_load(RTX.read_text())


def _write(tmp_path: Path, data, stem: str = "rtx5080-4mib") -> Path:
    path = tmp_path / f"{stem}.yaml"
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def _broken(tmp_path, data, stem="rtx5080-4mib") -> ScenarioError:
    path = _write(tmp_path, data, stem)
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert isinstance(info.value, ValueError)
    assert str(path) in str(info.value) and info.value.file == str(path)
    return info.value


def test_a_copy_of_a_good_file_loads_from_anywhere(tmp_path):
    assert load_scenario(_write(tmp_path, _good())) == load_scenario("rtx5080-4mib")


@pytest.mark.parametrize("field", ["name", "title", "source", "gpu", "parameters",
                                   "parameters.pool_mib", "parameters.kv_dtype",
                                   "parameters.model_weights_bytes"])
def test_missing_field_is_named(tmp_path, field):
    data = _good()
    *parents, leaf = field.split(".")
    target = data
    for part in parents:
        target = target[part]
    del target[leaf]
    err = _broken(tmp_path, data)
    assert err.field == field
    assert f"{field} is missing" in str(err)


def test_expected_block_is_optional(tmp_path):
    data = _good()
    del data["expected"]
    assert load_scenario(_write(tmp_path, data)).expected == {}


@pytest.mark.parametrize("field, value, accepted", [
    ("parameters.pool_mib", "4", "[1, 1048576]"),            # wrong type
    ("parameters.pool_mib", 4.5, "[1, 1048576]"),
    ("parameters.pool_mib", True, "[1, 1048576]"),           # a bool is not an int
    ("parameters.pool_mib", -4, "[1, 1048576]"),             # negative
    ("parameters.pool_mib", 0, "[1, 1048576]"),
    ("parameters.pool_mib", 1 << 40, "[1, 1048576]"),        # huge
    ("parameters.head_dim", -128, "[1, 16384]"),
    ("parameters.context_length", 10**12, "[1, 16777216]"),
    ("parameters.model_weights_bytes", -1, "[0, "),
    ("parameters.kv_dtype", "int4", "float16"),
    ("parameters.kv_dtype", 16, "bfloat16"),
    ("expected.total_blocks", -64, "[0, "),
    ("expected.width_clamped", "68", "[0, "),
    ("title", 5, "non-empty string"),
    ("title", "   ", "non-empty string"),
    ("name", "RTX 5080!", "lower-case file stem"),
    ("parameters", [1, 2], "a mapping with the fields"),
    ("expected", "none", "a mapping from some of"),
])
def test_bad_value_names_field_and_range(tmp_path, field, value, accepted):
    data = _good()
    *parents, leaf = field.split(".")
    target = data
    for part in parents:
        target = target[part]
    target[leaf] = value
    err = _broken(tmp_path, data)
    assert err.field == field
    assert field in str(err) and accepted in str(err)


@pytest.mark.parametrize("where", ["", "parameters", "expected"])
def test_unknown_key_is_rejected(tmp_path, where):
    data = _good()
    (data[where] if where else data)["pool_gib"] = 4
    err = _broken(tmp_path, data)
    field = f"{where}.pool_gib" if where else "pool_gib"
    assert err.field == field
    assert f"{field} is not a known field" in str(err)


def test_python_object_tag_is_refused(tmp_path):
    text = RTX.read_text().replace("pool_mib: 4", "pool_mib: !!python/object/apply:os.getpid []")
    err = _broken(tmp_path, text)
    assert err.field == "parameters.pool_mib"
    assert "python/object/apply:os.getpid" in str(err) and "YAML tag" in str(err)


def test_top_level_tag_is_refused(tmp_path):
    err = _broken(tmp_path, "!!python/object:kvlab.scenarios.Scenario {name: x}\n")
    assert err.field == "" and "YAML tag" in str(err)


def test_alias_and_duplicate_key_are_refused(tmp_path):
    text = RTX.read_text().replace("num_layers: 2", "num_layers: &n 2").replace(
        "num_kv_heads: 2", "num_kv_heads: *n")
    err = _broken(tmp_path, text)
    assert err.field == "parameters.num_kv_heads" and "alias" in str(err)
    text = RTX.read_text().replace("head_dim: 128", "head_dim: 128\n  head_dim: 64")
    err = _broken(tmp_path, text)
    assert err.field == "parameters.head_dim" and "given twice" in str(err)


@pytest.mark.parametrize("text", ["- a\n- b\n", "just text\n", "42\n"])
def test_document_that_is_not_a_mapping(tmp_path, text):
    err = _broken(tmp_path, text)
    assert err.field == ""
    assert "the document must be a mapping with the fields" in str(err)
    assert "parameters" in str(err)


@pytest.mark.parametrize("text", ["", "# only a comment\n", "name: [unclosed\n"])
def test_empty_or_unparsable_file(tmp_path, text):
    err = _broken(tmp_path, text)
    assert err.field == ""


def test_name_must_match_the_file_stem(tmp_path):
    err = _broken(tmp_path, _good(), stem="copy")
    assert err.field == "name" and "'copy'" in str(err) and "'rtx5080-4mib'" in str(err)


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(ScenarioError) as info:
        load_scenario("no-such-scenario")
    assert info.value.field == "name"
    assert "'no-such-scenario'" in str(info.value) and "rtx5080-4mib" in str(info.value)


def test_missing_path(tmp_path):
    with pytest.raises(ScenarioError) as info:
        load_scenario(tmp_path / "absent.yaml")
    assert "absent.yaml" in str(info.value)
