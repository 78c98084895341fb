"""kvlab.run.scenarios: loading data/scenarios/*.yaml, and refusing broken files with clear errors."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import yaml

from kvlab.run.scenario_schema import EXPECTED, Scenario, ScenarioParameters
from kvlab.run.scenarios import SCENARIO_DIR, ScenarioError, list_scenarios, load_scenario

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
    assert (
        p.pool_mib,
        p.num_layers,
        p.num_kv_heads,
        p.head_dim,
        p.kv_dtype,
        p.tokens_per_block,
    ) == (4, 2, 2, 128, "float16", 32)
    assert (
        p.configured_max_seq_len,
        p.max_batch_size,
        p.context_length,
        p.model_weights_bytes,
    ) == (8192, 1, 8192, 0)
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
    assert e == {
        "bytes_per_token": 2048,
        "capacity_tokens": 2048,
        "total_blocks": 64,
        "width_clamped": 68,
        "width_configured": 260,
        "entries_needed": 256,
    }


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


@pytest.mark.parametrize(
    "field",
    [
        "name",
        "title",
        "source",
        "gpu",
        "parameters",
        "parameters.pool_mib",
        "parameters.kv_dtype",
        "parameters.model_weights_bytes",
    ],
)
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


@pytest.mark.parametrize(
    "field, value, accepted",
    [
        ("parameters.pool_mib", "4", "[1, 1048576]"),  # wrong type
        ("parameters.pool_mib", 4.5, "[1, 1048576]"),
        ("parameters.pool_mib", True, "[1, 1048576]"),  # a bool is not an int
        ("parameters.pool_mib", -4, "[1, 1048576]"),  # negative
        ("parameters.pool_mib", 0, "[1, 1048576]"),
        ("parameters.pool_mib", 1 << 40, "[1, 1048576]"),  # huge
        ("parameters.head_dim", -128, "[1, 16384]"),
        ("parameters.context_length", 10**12, "[1, 16777216]"),
        ("parameters.model_weights_bytes", -1, "[0, "),
        ("parameters.kv_dtype", "int4", "float16"),
        ("parameters.kv_dtype", 16, "bfloat16"),
        ("expected.total_blocks", -64, "[0, "),
        ("expected.width_clamped", "68", "[0, "),
        ("expected.total_blocks", 65, "is 65, but the parameters give 64 (pages in the pool"),
        ("title", 5, "non-empty string"),
        ("title", "   ", "non-empty string"),
        ("name", "RTX 5080!", "lower-case file stem"),
        ("parameters", [1, 2], "a mapping with the fields"),
        ("expected", "none", "a mapping from some of"),
    ],
)
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
    err = _broken(tmp_path, "!!python/object:kvlab.run.scenario_schema.Scenario {name: x}\n")
    assert err.field == "" and "YAML tag" in str(err)


def test_alias_and_duplicate_key_are_refused(tmp_path):
    text = (
        RTX.read_text()
        .replace("num_layers: 2", "num_layers: &n 2")
        .replace("num_kv_heads: 2", "num_kv_heads: *n")
    )
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


# --- the multi-rank scenario of issue #21470 -----------------------------------------------------

GB300 = SCENARIO_DIR / "issue_21470_16x_gb300.yaml"


def test_issue_21470_loads_by_alias_and_stem():
    sc = load_scenario("issue-21470")
    assert sc == load_scenario("issue_21470_16x_gb300") == load_scenario(GB300)
    dep = sc.deployment
    assert (dep.ranks, dep.attention_dp, dep.expert_parallel_size) == (16, True, 16)
    assert dep.image == "1.4.0rc3.dev202610300406" and sc.gpu == "NVIDIA GB300"
    assert "#21470" in sc.source and "1.4.0rc3.dev202610300406" in sc.source
    (long_ctx,) = dep.requests
    assert (long_ctx.id, long_ctx.rank, long_ctx.prompt_len) == (
        "long-ctx",
        0,
        sc.parameters.context_length,
    )
    assert sc.parameters.pool_mib is None
    with pytest.raises(ValueError, match="memory budget sets each rank's pool"):
        _ = sc.parameters.pool_bytes


def test_issue_21470_marks_every_unstated_number_as_an_assumption():
    sc = load_scenario("issue-21470")
    for path in (
        "parameters.model_weights_bytes",
        "parameters.context_length",
        "parameters.kv_dtype",
        "deployment.workspace_gib",
        "deployment.gpu_memory_gib",
        "deployment.free_gpu_memory_fraction",
        "deployment.activations_gib",
    ):
        assumption = sc.assumptions[path]
        target = sc
        for part in path.split("."):
            target = getattr(target, part)
        assert assumption.value == target and assumption.why.strip()
        if not isinstance(target, str):
            assert assumption.range[0] <= target <= assumption.range[1]


def test_issue_21470_expected_values_follow_from_the_budget():
    """By hand: the last rank's budget (largest workspace) is the MIN every rank gets; the
    storage manager rounds its quota up to whole granules before cutting pages."""
    sc = load_scenario("issue-21470")
    p, d, e = sc.parameters, sc.deployment, sc.expected
    gib = 2**30
    bytes_per_token = p.num_layers * 2 * p.num_kv_heads * p.head_dim * 2
    workspace = (d.workspace_gib + d.workspace_skew_gib) * gib
    free = (
        d.gpu_memory_gib * gib
        - p.model_weights_bytes
        - workspace
        - (d.activations_gib + d.non_torch_gib) * gib
    )
    quota = int(free * d.free_gpu_memory_fraction)
    granule = 2 * 2**20 << min(4, max(0, int(math.log2(quota / gib))))  # the storage's granule
    blocks = math.ceil(quota / granule) * granule // (bytes_per_token * p.tokens_per_block)
    width = lambda n: 4 * math.ceil(math.ceil((n + 1) / p.tokens_per_block) / 4)  # noqa: E731
    assert e == {
        "bytes_per_token": bytes_per_token,
        "total_blocks": blocks,
        "capacity_tokens": blocks * p.tokens_per_block,
        "width_clamped": width(blocks * p.tokens_per_block),
        "width_configured": width(p.configured_max_seq_len),
        "entries_needed": math.ceil(p.context_length / p.tokens_per_block),
    }
    assert e["entries_needed"] > e["width_clamped"]  # so rank 0 raises


def _gb300() -> dict:
    return yaml.safe_load(GB300.read_text())


@pytest.mark.parametrize(
    "edit, field, message",
    [
        (
            lambda d: d["assumptions"]["deployment.workspace_gib"].update(value=30.0),
            "assumptions.deployment.workspace_gib.value",
            "they must agree",
        ),
        (
            lambda d: (
                d["deployment"].update(workspace_gib=99.0),
                d["assumptions"]["deployment.workspace_gib"].update(value=99.0),
            ),
            "assumptions.deployment.workspace_gib.value",
            "outside its range",
        ),
        (
            lambda d: d["assumptions"]["deployment.workspace_gib"].update(range=[64.0, 0.0]),
            "assumptions.deployment.workspace_gib.range",
            "low <= high",
        ),
        (
            lambda d: d["assumptions"]["parameters.kv_dtype"].update(range=["fp8"]),
            "assumptions.parameters.kv_dtype.range",
            "at least 2",
        ),
        (
            lambda d: d["assumptions"].update(
                {"deployment.gpu_count": {"value": 1, "range": [1, 2], "why": "x"}}
            ),
            "assumptions.deployment.gpu_count",
            "names no field",
        ),
        (
            lambda d: d["assumptions"].update(
                {"Not A Path": {"value": 1, "range": [1, 2], "why": "x"}}
            ),
            "assumptions.Not A Path",
            "dotted field path",
        ),
        (
            lambda d: d["deployment"]["requests"][0].update(rank=16),
            "deployment.requests[0].rank",
            "must be in [0, 15]",
        ),
        (
            lambda d: d["deployment"]["requests"].append(dict(d["deployment"]["requests"][0])),
            "deployment.requests[0].id",
            "given twice",
        ),
        (lambda d: d["deployment"].update(ranks=0), "deployment.ranks", "[1, 1024]"),
        (
            lambda d: d["deployment"].update(attention_dp="yes"),
            "deployment.attention_dp",
            "true or false",
        ),
        (
            lambda d: d["deployment"].update(free_gpu_memory_fraction=0),
            "deployment.free_gpu_memory_fraction",
            "(0.0, 1.0]",
        ),
        (lambda d: d["deployment"].update(requests=[]), "deployment.requests", "at least 1"),
        (lambda d: d["deployment"].update(gpus=16), "deployment.gpus", "not a known field"),
        (
            lambda d: d["deployment"]["requests"][0].update(gpus=1),
            "deployment.requests[0].gpus",
            "not a known field of deployment.requests[0]",
        ),
        (
            lambda d: d["deployment"]["background"].update(prompt_len_min=9000),
            "deployment.background.prompt_len_min",
            "must not exceed prompt_len_max",
        ),
        (
            lambda d: d["deployment"].update(expert_parallel_size=17),
            "deployment.expert_parallel_size",
            "must be in [1, 16] (deployment.ranks), got 17",
        ),
        (
            lambda d: d["parameters"].update(pool_mib=4),
            "parameters.pool_mib",
            "must be left out beside",
        ),
        (
            lambda d: d["expected"].update(
                width_clamped=29962
            ),  # before the rounding to a multiple of 4
            "expected.width_clamped",
            "expected.width_clamped is 29962, but the parameters give 29964",
        ),
        (
            lambda d: (
                d["deployment"].update(workspace_gib=240.0),
                d["assumptions"]["deployment.workspace_gib"].update(
                    value=240.0, range=[0.0, 256.0]
                ),
            ),
            "expected",
            "expected cannot be checked: the parameters and deployment give no pool",
        ),
    ],
)
def test_issue_21470_broken_copies_name_the_field(tmp_path, edit, field, message):
    data = _gb300()
    edit(data)
    err = _broken(tmp_path, data, stem="issue_21470_16x_gb300")
    assert err.field == field and message in str(err)


def test_a_deployment_may_leave_out_pool_mib_and_a_plain_scenario_may_not(tmp_path):
    assert (
        load_scenario(_write(tmp_path, _gb300(), "issue_21470_16x_gb300")).parameters.pool_mib
        is None
    )
    data = _good()
    del data["parameters"]["pool_mib"]
    err = _broken(tmp_path, data)
    assert err.field == "parameters.pool_mib" and "only a scenario with a `deployment`" in str(err)


# --- hostile files -------------------------------------------------------------------------------


def test_an_integer_too_long_to_convert_is_refused_with_its_field(tmp_path):
    text = RTX.read_text().replace("head_dim: 128", "head_dim: 0x" + "f" * 5000)
    err = _broken(tmp_path, text)
    assert err.field == "parameters.head_dim" and "an integer of 5002 characters" in str(err)


def test_nesting_deeper_than_the_parser_goes_is_refused(tmp_path):
    err = _broken(tmp_path, "a: " + "[" * 20000 + "]" * 20000 + "\n")
    assert err.field == "" and "nested too deeply" in str(err)


def test_a_file_over_max_file_bytes_is_not_read(tmp_path):
    from kvlab.run.scenarios import MAX_FILE_BYTES

    err = _broken(tmp_path, RTX.read_text() + "#" * MAX_FILE_BYTES)
    assert f"larger than MAX_FILE_BYTES={MAX_FILE_BYTES}" in str(err)
    assert load_scenario(_write(tmp_path, RTX.read_text() + "#" * 1000)).name == "rtx5080-4mib"


@pytest.mark.parametrize(
    "make", [lambda tmp: (tmp / "d.yaml").mkdir() or tmp / "d.yaml", lambda tmp: Path("/dev/zero")]
)
def test_what_is_not_a_regular_file_is_refused_without_reading_it(tmp_path, make):
    path = make(tmp_path)
    if not path.exists():
        pytest.skip(f"{path} does not exist on this system")
    with pytest.raises(ScenarioError, match="not a regular file"):
        load_scenario(path)
