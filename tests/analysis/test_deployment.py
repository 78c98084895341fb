"""kvlab.analysis.deployment: the preflight plan reproduces notebooks 01, 02 and 05 from the
shipped presets, its context ranges are exact, and it agrees with the multi-rank plan and with
real engine runs."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from bounds import HANG_S

from kvlab.analysis.context_ranges import change_points, v2_segments
from kvlab.analysis.deployment import Deployment, example_deployments, plan_deployment
from kvlab.analysis.models import load_model
from kvlab.analysis.phase import PhaseSetup, phase_scenario, phase_verdicts
from kvlab.analysis.presets import ENGINE_OUTCOMES, engine_outcome
from kvlab.analysis.rank_plan import plan_ranks
from kvlab.cli import main
from kvlab.core.geometry import KVGeometry
from kvlab.core.memory import GIB
from kvlab.run.rank_config import scenario_config
from kvlab.run.scenarios import load_scenario
from kvlab.run.simulation import simulate
from kvlab.sched.policies import TRTLLM_POLICIES

EXAMPLES = example_deployments()


def verdict_at(plan, policy, context):
    return next(s.verdict for s in plan.ranges[policy] if s.low <= context <= s.high)


def test_issue_21470_as_notebook_01_and_the_scenario_state_it():
    plan = plan_deployment(EXAMPLES["issue-21470"])
    expected = load_scenario("issue-21470").expected
    assert plan.bytes_per_token == expected["bytes_per_token"] == 192512
    assert plan.blocks == expected["total_blocks"] == 29962
    assert plan.capacity_tokens == expected["capacity_tokens"] == 958784
    assert plan.clamped_max_seq_len == 958784 and plan.clamped
    assert (
        (plan.width_current, plan.width_fix)
        == (expected["width_clamped"], expected["width_configured"])
        == (29964, 32772)
    )
    assert [verdict_at(plan, p, 1_000_000) for p in TRTLLM_POLICIES] == ["crash", "stall", "reject"]
    assert plan.worst() == "crash" and plan.exit_code == 4
    assert len(plan.quotas) == 16 and plan.local_blocks[0] > plan.local_blocks[-1] == plan.blocks


def test_the_plan_says_why_admission_rejects_what_current_code_finishes():
    """Issue 45: 06 showed 958,721 finishing now beside admission's ok range ending at 958,720,
    unexplained. Each note is there exactly where the two ranges end apart."""
    for name in EXAMPLES:
        plan = plan_deployment(EXAMPLES[name])
        now, admitted = plan.longest("none/clamped"), plan.longest("capacity")
        said = [n for n in plan.notes if n.startswith("admission control rejects")]
        assert len(said) == (0 < admitted < now), name
        if said:
            span = f"{now:,}" if now == admitted + 1 else f"{admitted + 1:,}-{now:,}"
            assert said[0].startswith(f"admission control rejects {span}, which"), said
    plan = plan_deployment(EXAMPLES["issue-21470"])
    assert (plan.longest(), plan.longest("capacity")) == (958_721, 958_720)
    assert "rejects 958,721, which current code finishes" in plan.explain(width=None)


def test_the_ranks_agree_with_the_multi_rank_plan():
    """One arithmetic: the plan's ranks are what kvlab.analysis.rank_plan (and the real rank
    processes it is tested against) build for the same scenario."""
    ranks = plan_ranks(scenario_config(load_scenario("issue-21470"))).ranks
    plan = plan_deployment(EXAMPLES["issue-21470"])
    assert plan.local_blocks == tuple(r.local_blocks for r in ranks)
    assert plan.quotas == tuple(r.local_quota_bytes for r in ranks)
    assert {r.max_blocks_per_seq for r in ranks} == {plan.width_current}


def test_the_4_mib_repro_as_notebook_02_states_it():
    plan = plan_deployment(EXAMPLES["rtx5080-4mib"])
    assert (plan.bytes_per_token, plan.blocks, plan.capacity_tokens) == (2048, 64, 2048)
    assert (plan.width_current, plan.width_fix) == (68, 260)
    assert [verdict_at(plan, p, 8192) for p in TRTLLM_POLICIES] == ["crash", "stall", "reject"]
    assert plan.quotas == (4 * 2**20,)


def test_pr_17261_as_notebook_05_states_it():
    plan = plan_deployment(EXAMPLES["pr-17261"])
    h = plan.hybrid
    assert h["slots"] == 513 and round(h["need_bytes"] / GIB, 2) == 37.48
    assert round(h["quota_bytes"] / GIB, 2) == 24.86 and not h["merged_builds"]
    assert h["error"].startswith("ValueError: The V2 Mamba GPU cache quota is too small")
    assert (h["clamp_resident"], h["feasible_max_batch_size"]) == (339, 339)
    # construction raises: nothing runs under any current policy, admission control included
    assert plan.worst() == plan.worst("capacity") == "crash" and not plan.starts
    assert set(plan.ranges) == {"pr-17261"} and plan.longest() == 0
    assert plan.longest("pr-17261") > 0
    assert "merged TensorRT-LLM raises at construction" in " ".join(plan.explain().split())
    assert "Longest context that finishes now" not in plan.explain()


@pytest.mark.parametrize(
    "tpb, extra, new, mnt, max_len, pool",
    [
        (32, 0, 16, 1 << 30, 8192, 64),
        (32, 0, 1, 1 << 30, 3000, 64),
        (16, 3, 0, 700, 2000, 40),
        (8, 0, 64, 1 << 30, 1500, 70),
        (1, 0, 5, 100, 300, 150),
    ],
)
def test_the_ranges_are_exact_at_every_context_length(tpb, extra, new, mnt, max_len, pool):
    geo = KVGeometry(num_layers=1, num_kv_heads=1, head_dim=16, tokens_per_block=tpb)
    setup = PhaseSetup(
        geometry=geo,
        max_seq_len=max_len,
        max_new_tokens=new,
        max_num_tokens=mnt,
        num_extra_kv_tokens=extra,
    )
    every = np.arange(1, max_len + 1)
    for policy in TRTLLM_POLICIES:
        brute = phase_verdicts([pool], every, policy, setup)[0]
        segments = v2_segments(pool, policy, setup, change_points(setup, max_len), max_len)
        assert segments[0].low == 1 and segments[-1].high == max_len
        assert all(
            a.high + 1 == b.low and a.verdict != b.verdict for a, b in zip(segments, segments[1:])
        )
        spread = np.concatenate([[s.verdict] * (s.high - s.low + 1) for s in segments])
        assert list(spread) == [ENGINE_OUTCOMES[c] for c in brute]


@pytest.mark.parametrize("context", [2000, 2040, 2100, 8192])
@pytest.mark.parametrize("policy", TRTLLM_POLICIES)
def test_a_range_is_what_a_real_engine_run_ends_in(context, policy):
    """The 4 MiB plan against kvlab's real manager and scheduler running the lone request."""
    deployment = EXAMPLES["rtx5080-4mib"]
    plan = plan_deployment(deployment)
    setup = PhaseSetup(
        geometry=deployment.kv_geometry(),
        max_seq_len=8192,
        max_new_tokens=16,
        max_num_tokens=deployment.max_num_tokens,
    )
    scheduler, requests = phase_scenario(plan.blocks, context, policy, setup)
    assert engine_outcome(simulate(scheduler, requests, max_steps=200)) == verdict_at(
        plan, policy, context
    )


def test_a_deployment_that_stalls_but_never_crashes_exits_3(capsys):
    """A configured max_seq_len just past the pool: the clamped row still covers it."""
    plan = plan_deployment(dataclasses.replace(EXAMPLES["rtx5080-4mib"], max_seq_len=2100))
    assert plan.worst() == "stall" and plan.exit_code == 3
    assert main(["plan", "--example", "rtx5080-4mib", "--max-seq-len", "2100"]) == 3


def test_a_roomy_deployment_is_safe():
    plan = plan_deployment(
        Deployment(
            model=load_model("llama-3.1-8b"), gpu_gib=80.0, max_batch_size=64, chunked_prefill=True
        )
    )
    assert plan.manager == "v1" and not plan.clamped and plan.exit_code == 0
    assert plan.worst() == "ok" and plan.longest() == 131072 and plan.first("crash") is None


def test_the_blocks_per_sequence_name_the_max_seq_len_they_come_from():
    """V1's blocks per sequence come from the KV manager's max_seq_len: "as clamped" only where
    the pool clamped it (notebook 06 section 3's llama-3.1-70b is not clamped)."""
    for plan in (
        plan_deployment(
            Deployment(
                model=load_model("llama-3.1-70b"),
                gpu_gib=79.6,
                tp_size=4,
                max_batch_size=256,
                chunked_prefill=True,
            )
        ),
        plan_deployment(dataclasses.replace(EXAMPLES["issue-21470"], manager="auto")),
    ):
        tpb = plan.deployment.tokens_per_block
        line = next(
            x for x in plan.explain(width=None).splitlines() if x.startswith("Blocks per sequence")
        )
        assert plan.manager == "v1" and plan.width_current == -(-plan.clamped_max_seq_len // tpb)
        assert line == (
            f"Blocks per sequence: {plan.width_current:,} (ceil of the KV manager's "
            f"max_seq_len{', as clamped,' if plan.clamped else ''} "
            f"{plan.clamped_max_seq_len:,} over {tpb} tokens a block)"
        )
        assert ("clamped" in line) == plan.clamped


def test_what_the_plan_simplifies_is_said():
    d = Deployment(
        model=load_model("mistral-7b-v0.1"), gpu_gib=80.0, pp_size=2, host_cache_gib=64.0
    )
    plan = plan_deployment(d)
    text = " ".join(plan.explain().split())  # explain() breaks lines between words
    assert "max_attention_window" in text and "Mapping.pp_layers" in text and "split evenly" in text
    assert "Host tier: 64.0 GiB per rank" in text and "no verdict changes" in text
    assert d.weights_bytes == 7241732096 * 2 // 2  # bf16 over pp 2


def test_weights_derived_from_the_parameters_shrink_with_tp_and_pp():
    model = load_model("llama-3.1-70b")
    one = Deployment(model=model, gpu_gib=80.0).weights_bytes
    assert one == 2 * model.parameters  # dense bf16 on one rank: unchanged by the norms
    norms = 80 * 2 * 8192 + 8192  # input and post-attention a layer, the final norm: whole per tp
    split = Deployment(model=model, gpu_gib=80.0, tp_size=4, pp_size=2).weights_bytes
    assert split == (one - 2 * norms) // 8 + 2 * norms // 2
    # fp8 weights, the embeddings and lm_head (2 x 128,256 x 8,192 parameters) and norms in bf16
    kept = 2 * 128256 * 8192 + norms
    assert Deployment(model=model, gpu_gib=80.0, weights_dtype="fp8").weights_bytes == 2 * kept + (
        model.parameters - kept
    )


def test_fp8_qwen3_moe_keeps_its_routers_and_norms_in_bf16_on_every_tp_rank():
    model = load_model("qwen3-235b-a22b")
    layers, hidden, experts, head_dim = 94, 4096, 128, 128
    assert (model.num_layers, model.head_dim) == (layers, head_dim)
    router = layers * experts * hidden  # mlp.gate: experts x hidden, every layer a MoE layer
    norms = layers * (2 * hidden + 2 * head_dim) + hidden  # layernorms, q_norm / k_norm, final
    whole = 2 * (router + norms)  # bf16
    assert whole == 100_162_560
    embed = 2 * 151936 * hidden
    quantized = model.parameters - embed - router - norms
    fp8 = Deployment(model=model, gpu_gib=80.0, tp_size=8, weights_dtype="fp8").weights_bytes
    assert fp8 == (2 * embed + quantized) // 8 + whole == 29_636_189_184
    before = (2 * embed + (model.parameters - embed)) // 8  # routers and norms fp8, split by tp
    assert fp8 - before == whole - (router + norms) // 8 == 93_902_400
    bf16 = Deployment(model=model, gpu_gib=80.0, tp_size=8).weights_bytes
    assert bf16 == (2 * model.parameters - whole) // 8 + whole


@pytest.mark.parametrize(
    "kwargs, named",
    [
        (dict(gpu_gib=0), "gpu_gib"),
        (dict(gpu_gib=80, tp_size=0), "tp_size"),
        (dict(gpu_gib=80, pp_size=81), "pp_size must be in [1, 80]"),
        (dict(gpu_gib=80, kv_dtype="int8"), "kv_dtype"),
        (dict(gpu_gib=80, free_gpu_memory_fraction=1.5), "free_gpu_memory_fraction"),
        (dict(gpu_gib=80, max_batch_size=0), "max_batch_size"),
        (dict(gpu_gib=80, workspace_gib=-1), "workspace_gib"),
        (dict(gpu_gib=80, kv_dtype="nvfp4", tokens_per_block=0), "tokens_per_block"),
    ],
)
def test_bad_deployments_name_the_parameter(kwargs, named):
    with pytest.raises(
        (ValueError, TypeError), match=named.replace("[", r"\[").replace("]", r"\]")
    ):
        Deployment(model=load_model("llama-3.1-70b"), **kwargs)


@pytest.mark.parametrize("model", [None, {"name": "llama-3.1-70b"}, "llama-3.1-70b"])
def test_a_model_that_is_not_a_geometry_is_named(model):
    """A dict, a name or None is not a ModelGeometry: the parameter is named, not an
    AttributeError from deep in the checks."""
    with pytest.raises(
        TypeError, match=r"model must be a ModelGeometry, got .*\(" + type(model).__name__
    ):
        Deployment(model=model, gpu_gib=80)


def test_the_command_prints_json_with_the_exit_code(capsys):
    assert main(["plan", "--example", "issue-21470", "--json"]) == 4
    data = json.loads(capsys.readouterr().out)
    assert data["blocks"] == 29962 and data["width"] == {"current": 29964, "one_line_fix": 32772}
    assert data["policies"]["none/clamped"]["worst"] == "crash" and data["exit_code"] == 4
    assert main(["plan", "--model", "llama-3.1-8b", "--gpu", "h100-80gb", "--chunked-prefill"]) == 0
    assert "Verdict: safe" in capsys.readouterr().out


def test_the_command_overrides_an_example(capsys):
    assert (
        main(
            [
                "plan",
                "--example",
                "issue-21470",
                "--workspace-gib",
                "0",
                "--workspace-skew-gib",
                "0",
                "--max-seq-len",
                "131072",
            ]
        )
        == 0
    )
    assert "not clamped" in capsys.readouterr().out


def test_the_command_reads_a_config(tmp_path, capsys):
    from kvlab.analysis.models import load_preset

    (tmp_path / "config.json").write_text(json.dumps(load_preset("deepseek-v3")["config"]))
    code = main(
        [
            "plan",
            "--config",
            str(tmp_path),
            "--gpu",
            "b200",
            "--tp-size",
            "8",
            "--weights-dtype",
            "fp8",
            "--max-seq-len",
            "163840",
        ]
    )
    out = capsys.readouterr().out
    assert "61 layers x 1 (K only, MLA) x 1 KV heads x 576 dims" in out
    assert code in (0, 3, 4, 5)


def test_explain_breaks_lines_between_words_only():
    text = plan_deployment(EXAMPLES["pr-17261"]).explain()
    assert all(len(line) <= 100 for line in text.splitlines())
    # a break inside a word would leave a space in it once the lines are joined
    joined = " ".join(text.split())
    assert "PR #17261's clamp (a proposal, closed without merging) keeps 339 resident" in joined
    assert (
        "The V2 Mamba GPU cache quota is too small for live recurrent states and attention pages"
        in joined
    )


def test_the_command_stops_quietly_when_its_reader_goes_away():
    import subprocess
    import sys

    proc = subprocess.run(
        f"{sys.executable} -m kvlab plan --example issue-21470 | head -1",
        shell=True,
        capture_output=True,
        text=True,
    )
    assert proc.stdout.startswith("qwen3-235b-a22b") and "Traceback" not in proc.stderr


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
@pytest.mark.parametrize("command", [["plan", "--example", "issue-21470"], ["doctor"]])
def test_a_full_disk_is_one_line_and_exit_74(command):
    import subprocess
    import sys

    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [sys.executable, "-m", "kvlab", *command],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=HANG_S,
            cwd=Path(__file__).parents[2],
        )
    assert proc.returncode == 74
    assert proc.stderr == "kvlab: cannot write the output: No space left on device\n"
