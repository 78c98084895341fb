"""The kvlab command: repro arithmetic and exit codes, usage errors, the walkthrough job."""

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import pytest
from bounds import HANG_S

from kvlab.cli import REPRO_EXIT_CODES, main


def test_repro_clamped_crashes_with_the_native_message(capsys):
    assert main(["repro", "--pool-mib", "4", "--context", "8192", "--policy", "none/clamped"]) == 4
    out = capsys.readouterr().out
    assert "= 2,048 B" in out
    assert "64 blocks of 32 tokens" in out
    assert "clamped to 2,048" in out
    assert "ceil((2,048 + 1) / 32) = 65 -> 68 entries" in out
    assert "ceil(8,192 / 32) = 256 entries" in out
    assert "User-provided base page indices is too short" in out


def test_repro_configured_is_refused_and_retry_succeeds(capsys):
    assert main(["repro", "--policy", "none/configured"]) == REPRO_EXIT_CODES["refused"] == 3
    out = capsys.readouterr().out
    assert "ceil((8,192 + 1) / 32) = 257 -> 260 entries" in out
    assert "resize returned False" in out and "state preserved: True" in out
    assert "32-token retry succeeded" in out


def test_repro_big_pool_allocates(capsys):
    assert main(["repro", "--pool-mib", "64", "--policy", "none/clamped"]) == 0
    assert "allocated - 256 of 1,024 pages" in capsys.readouterr().out


# the rows of tests/test_input_table.py's command table are not repeated here
@pytest.mark.parametrize(
    "argv, named",
    [
        (["repro", "--context", "abc"], "--context"),
        (["repro", "--pool-mib", "0.001"], "pool_mib"),
        (["scenario", "issue-21470", "--ranks", "999"], "ranks must be in [1, 128]"),
        (["scenario", "issue-21470", "--ranks", "two"], "--ranks"),
        (["scenario", "issue-21470", "--policy", "wide"], "--policy"),
    ],
)
def test_bad_arguments_exit_2_with_usage(argv, named, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "usage:" in err and named in err


def test_bad_arguments_print_no_traceback():
    proc = subprocess.run(
        [sys.executable, "-m", "kvlab", "repro", "--pool-mib", "-3"], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and "usage:" in proc.stderr


def _notebook(path, body):
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell("scale: int = 2\nSMOKE: bool = False")
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell(body)]
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, path)


@pytest.mark.notebook
def test_walkthrough_runs_notebooks_and_summarises(tmp_path, capfd):
    nbdir = tmp_path / "nb"
    nbdir.mkdir()
    _notebook(
        nbdir / "01_good.ipynb",
        "from kvlab.notebook.findings import Finding, report_findings\n"
        "report_findings([Finding('demo', 'none', 'ok', f'scale={scale} smoke={SMOKE}')])",
    )
    _notebook(nbdir / "02_bad.ipynb", "assert scale == 2, 'claim no longer true'")
    build = tmp_path / "build"
    code = main(
        [
            "walkthrough",
            "--notebook-dir",
            str(nbdir),
            "--build-dir",
            str(build),
            "-p",
            "scale=3",
            "--smoke",
        ]
    )
    out, err = capfd.readouterr()  # the kernels' own output too (file descriptors)
    assert "without encryption" not in err  # the kernels listen on IPC sockets, not TCP
    assert code == 1  # the second notebook's claim failed
    assert "scale=3 smoke=True" in out
    assert "02_bad" in out and "FAILED" in out and "claim no longer true" in out
    assert (build / "notebooks" / "01_good.ipynb").exists()
    assert "scale=3" in (build / "html" / "01_good.html").read_text()


# --- kvlab scenario: the multi-rank run of issue #21470 --------------------------------------------

from kvlab.cli import SCENARIO_EXIT_CODES  # noqa: E402


@pytest.mark.parametrize(
    "policy, code, ended",
    [
        (
            "none/clamped",
            4,
            "shut down - rank 0 raised ValueError: User-provided base page indices is too short",
        ),
        ("capacity", 0, "completed - every rank finished its work"),
    ],
)
def test_scenario_runs_rank_processes_and_exits_by_how_the_run_ended(policy, code, ended, capsys):
    assert main(["scenario", "issue-21470", "--ranks", "4", "--policy", policy]) == code
    out = capsys.readouterr().out
    assert f"4 ranks (process, gloo), policy {policy}: {ended}" in out
    assert out.count("29962 blk =    958784 tok") == 4  # every rank's pool after the MIN
    assert "31847 blk" in out  # rank 0's own pool, before it


def test_scenario_past_its_deadline_exits_6_and_says_so(capsys):
    assert main(["scenario", "issue-21470", "--ranks", "16", "--deadline", "0.05"]) == 6
    out = capsys.readouterr().out
    assert "policy none/clamped: deadline - the run passed its deadline_s=0.05" in out
    assert "deadline_s=0.05" in out.splitlines()[-1]


def test_scenario_in_process_by_file_stem(capsys):
    assert (
        main(["scenario", "issue_21470_16x_gb300", "--in-process"])
        == SCENARIO_EXIT_CODES["shut down"]
    )
    out = capsys.readouterr().out
    assert "16 ranks (in-process), policy none/clamped: shut down" in out
    assert out.count("shut down: rank 0 raised ValueError") == 15


def test_scenario_nccl_without_gpus_is_a_usage_error(capsys):
    import torch

    if torch.cuda.is_available() and torch.cuda.device_count() >= 2:
        pytest.skip("this machine has a GPU per rank")
    with pytest.raises(SystemExit) as exc:
        main(["scenario", "issue-21470", "--ranks", "2", "--backend", "nccl"])
    assert exc.value.code == 2
    assert "backend='nccl' needs one CUDA GPU per rank: ranks=2" in capsys.readouterr().err


# --- bad input the parser cannot see -----------------------------------------------------------


@pytest.mark.parametrize(
    "argv, named",
    [
        (
            ["-p", "scal=3"],
            "parameter 'scal' is not a parameter of the selected notebooks (01_good); "
            "they accept SMOKE: bool, scale: int",
        ),
        (["-p", "scale=3.5"], "parameter scale must be int, got 3.5 (float)"),
        (["-p", "scale=True"], "parameter scale must be int, got True (bool)"),
        (["-p", "SMOKE=1"], "parameter SMOKE must be bool, got 1 (int)"),
    ],
)
def test_walkthrough_parameters_are_checked_before_any_notebook_runs(tmp_path, argv, named, capsys):
    nbdir = tmp_path / "nb"
    nbdir.mkdir()
    _notebook(nbdir / "01_good.ipynb", "raise RuntimeError('must not run')")
    with pytest.raises(SystemExit) as exc:
        main(
            ["walkthrough", "--notebook-dir", str(nbdir), "--build-dir", str(tmp_path / "b"), *argv]
        )
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "usage:" in err and named in err
    assert not (tmp_path / "b").exists()


def test_a_pool_the_machine_cannot_allocate_is_a_usage_error(monkeypatch, capsys):
    import kvlab.core.pool as pool_module

    def refuse(num_blocks, bytes_per_block, device):
        raise RuntimeError(
            "DefaultCPUAllocator: can't allocate memory: you tried to allocate "
            f"{num_blocks * bytes_per_block} bytes"
        )

    monkeypatch.setattr(pool_module, "PagePool", refuse)
    with pytest.raises(SystemExit) as exc:
        main(["repro", "--pool-mib", "65536"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "usage:" in err and "quota_bytes=68719476736" in err and "cannot be allocated" in err


@pytest.mark.parametrize(
    "text, named",
    [
        ("[" * 20000 + "]" * 20000, "nested too deeply"),
        ("name: x\ntitle: " + "9" * 5000 + "\n", "title is an integer of 5000 characters"),
    ],
)
def test_a_hostile_scenario_file_prints_no_traceback(tmp_path, text, named):
    path = tmp_path / "x.yaml"
    path.write_text(text)
    proc = subprocess.run(
        [sys.executable, "-m", "kvlab", "scenario", str(path)],
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and "usage:" in proc.stderr and named in proc.stderr


def test_help_names_every_command(capsys):
    from kvlab.cli import build_parser

    commands = next(a for a in build_parser()._actions if a.dest == "command").choices
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    out = capsys.readouterr().out
    assert exc.value.code == 0 and set(commands) == {
        "repro",
        "walkthrough",
        "scenario",
        "plan",
        "replay",
        "doctor",
        "slides",
    }
    assert out.startswith(
        "usage: kvlab [-h] {repro,walkthrough,scenario,plan,replay,doctor,slides}"
    )


def test_a_scenario_run_on_other_ranks_says_so(capsys):
    assert (
        main(["scenario", "issue-21470", "--ranks", "2", "--in-process", "--policy", "capacity"])
        == 0
    )
    first = capsys.readouterr().out.splitlines()[0]
    assert first.endswith("(the scenario's 16 ranks changed to 2)")


@pytest.mark.notebook
def test_walkthrough_reports_what_it_cannot_do_and_goes_on(tmp_path, capfd):
    nbdir = tmp_path / "nb"
    nbdir.mkdir()
    _notebook(nbdir / "01_good.ipynb", "x = scale")
    _notebook(nbdir / "02_also.ipynb", "y = scale")
    (nbdir / "03_folder.ipynb").mkdir()  # a folder named like a notebook: not one
    build = tmp_path / "build"
    (build / "html" / "01_good.html").mkdir(parents=True)  # the HTML target is a folder
    code = main(["walkthrough", "--notebook-dir", str(nbdir), "--build-dir", str(build)])
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err
    assert code == 1 and "cannot write its output" in out and "01_good.html" in out
    assert (build / "html" / "02_also.html").is_file()  # the next notebook still ran
    assert "03_folder" not in out

    (nbdir / "04_broken.ipynb").write_text("not json", encoding="utf-8")
    with pytest.raises(SystemExit) as exc:
        main(["walkthrough", "--notebook-dir", str(nbdir), "--build-dir", str(build)])
    assert exc.value.code == 2
    assert "04_broken.ipynb is not a notebook papermill can read" in capfd.readouterr().err


def test_walkthrough_stopped_by_ctrl_c_says_what_ran_and_what_did_not(
    tmp_path, monkeypatch, capsys
):
    from kvlab.notebook import walkthrough

    nbdir = tmp_path / "nb"
    nbdir.mkdir()
    for name in ("01_a", "02_b", "03_c"):
        _notebook(nbdir / f"{name}.ipynb", "x = scale")
    ran = []

    def run_notebook(path, build_dir, parameters):
        if len(ran) == 1:
            raise KeyboardInterrupt
        ran.append(path.stem)
        return walkthrough.NotebookRun(path.stem, 0.1, build_dir / path.name, None, [], None)

    monkeypatch.setattr(walkthrough, "run_notebook", run_notebook)
    code = main(["walkthrough", "--notebook-dir", str(nbdir), "--build-dir", str(tmp_path / "b")])
    out, err = capsys.readouterr()
    assert code == 130 and "01_a" in out
    assert "stopped by Ctrl-C while running 02_b.ipynb; not run: 02_b.ipynb, 03_c.ipynb" in err


def _walkthrough_process(tmp_path, body):
    """A walkthrough of one notebook running ``body``, in a process of its own whose Jupyter
    runtime folder and temporary folder are under ``tmp_path``."""
    nbdir, tmp = tmp_path / "nb", tmp_path / "tmp"
    runtime = Path(tempfile.mkdtemp(prefix="rt-", dir="/tmp"))  # short: socket paths fit
    for folder in (nbdir, tmp):
        folder.mkdir()
    _notebook(nbdir / "01_slow.ipynb", body)
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(runtime), TMPDIR=str(tmp))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kvlab",
            "walkthrough",
            "--notebook-dir",
            str(nbdir),
            "--build-dir",
            str(tmp_path / "build"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    return proc, nbdir, runtime, tmp


def _left_behind(nbdir, runtime, tmp):
    return (
        sorted(p.name for p in nbdir.iterdir() if not p.name.endswith(".ipynb"))
        + sorted(p.name for p in runtime.iterdir())
        + sorted(p.name for p in tmp.rglob("*.json"))
    )


@pytest.mark.notebook
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGKILL])
def test_walkthrough_stopped_by_a_signal_leaves_no_kernel_file(tmp_path, signum):
    """The kernels' connection files (with their HMAC key) and IPC sockets live in a private
    folder of Jupyter's runtime folder and go with the walkthrough, whatever ends it; SIGTERM
    and SIGHUP end it as Ctrl-C does (the summary, exit 128 + n, no traceback)."""
    proc, nbdir, runtime, tmp = _walkthrough_process(tmp_path, "import time\ntime.sleep(120)")
    deadline = time.monotonic() + 60
    while not list(runtime.glob("kvlab-*/k-*.json")):
        assert time.monotonic() < deadline and proc.poll() is None, "the kernel never started"
        time.sleep(0.2)
    time.sleep(1.0)  # the first cells are running
    assert not list(nbdir.glob("kernel-ipc*")) and not list(tmp.rglob("*.json"))
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=60)
    if signum == signal.SIGKILL:
        assert proc.returncode == -signal.SIGKILL
        deadline = (
            time.monotonic() + 10
        )  # the reaper removes the folder once the walkthrough is gone
        while _left_behind(nbdir, runtime, tmp) and time.monotonic() < deadline:
            time.sleep(0.2)
    else:
        assert proc.returncode == 128 + signum and "Traceback" not in out + err, out + err
        assert f"stopped by {signal.Signals(signum).name} while running 01_slow.ipynb" in err
    assert _left_behind(nbdir, runtime, tmp) == []
    runtime.rmdir()


@pytest.mark.notebook
def test_a_run_the_kernel_did_not_finish_is_marked_partial(tmp_path):
    import nbformat

    nbdir = tmp_path / "nb"
    nbdir.mkdir()
    _notebook(nbdir / "01_dies.ipynb", "import os\nos._exit(1)")
    nb = nbformat.read(nbdir / "01_dies.ipynb", as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell("never = 1"))
    nbformat.write(nb, nbdir / "01_dies.ipynb")
    build = tmp_path / "build"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "kvlab",
            "walkthrough",
            "--notebook-dir",
            str(nbdir),
            "--build-dir",
            str(build),
        ],
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert proc.returncode == 1 and "the kernel stopped" in proc.stdout
    executed = nbformat.read(build / "notebooks" / "01_dies.ipynb", as_version=4)
    assert executed.metadata["kvlab"]["partial"] is True
    assert "the kernel stopped" in executed.metadata["kvlab"]["error"]
    assert executed.cells[0].source.startswith("**Partial run.**")
    assert executed.cells[-1].metadata.papermill["status"] == "pending"  # papermill said completed
    assert "Partial run." in (build / "html" / "01_dies.html").read_text(encoding="utf-8")


# --- kvlab doctor and kvlab slides: the workshop's pre-day check and its decks ---------------------


@pytest.mark.parametrize(
    "argv, named",
    [
        (["doctor", "--jsn"], "unrecognized arguments: --jsn"),
        (["doctor", "extra"], "unrecognized arguments: extra"),
        (["slides", "--only", "99"], "no notebook"),
        (["slides", "--notebook-dir", "/no/such/folder"], "is not a folder"),
    ],
)
def test_doctor_and_slides_bad_arguments_exit_2_with_usage(argv, named, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "usage:" in err and named in err


def test_doctor_bad_flag_prints_no_traceback():
    proc = subprocess.run(
        [sys.executable, "-m", "kvlab", "doctor", "--bogus"], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and "unrecognized arguments: --bogus" in proc.stderr


def test_slides_writes_one_deck_per_selected_notebook_and_an_index(tmp_path, capsys):
    assert (
        main(
            [
                "slides",
                "--only",
                "02",
                "--only",
                "ex1",
                "--out",
                str(tmp_path),
                "--executed-dir",
                str(tmp_path / "none"),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "02_single_gpu_repro_4mib.html",
        "ex1_page_index_width.html",
        "index.html",
    ]
    assert "text only: no executed copy" in out and "index.html" in out
    # issue 45: the exercise's deck advised `kvlab walkthrough`, which never runs exercises
    exercise = next(line for line in out.splitlines() if "ex1_page_index_width.html" in line)
    assert "text only: an exercise draws no figures" in exercise
    # the presenter learns the keys from the command, not from the deck's source
    assert "N shows the speaker notes" in out and "S in a window of their own" in out
    index = (tmp_path / "index.html").read_text()
    assert (
        'href="02_single_gpu_repro_4mib.html"' in index
        and 'href="ex1_page_index_width.html"' in index
    )
