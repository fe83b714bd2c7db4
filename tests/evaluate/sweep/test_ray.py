"""The sweep as Ray tasks, on one private Ray instance for the session (`ray_address` in conftest: 2 CPUs,
loopback only): the same rows as in this process, retries, a unit that always fails named in one line while the
rest is written, nothing of Ray's on the driver's stdout, a driver killed mid-grid resumed without duplicates,
Ctrl-C cancelling what still runs; and the flags refused before any work, and measured speedups of different
machines kept off one front.

A fault is injected by swapping `skipcore.evaluate.sweep.units.unit_rows` in this process: the runner sends the
function with the job, so the Ray workers run the swapped one (a closure travels by value)."""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from skipcore.commands import build_parser, main
from skipcore.commands.sweep import config_from_args
from skipcore.evaluate.sweep import GridIncomplete, RayExecutor, rows, units
from skipcore.evaluate.sweep.runner import run_sweep
from skipcore.evaluate.sweep.store import read_sweep
from skipcore.files import read_parquet
from skipcore.traces import read_trace
from tests.helpers import REPO, descendants, sweep_config

pytestmark = pytest.mark.slow  # a private Ray instance

SAME = [
    "setting_id",
    "bleu",
    "rougeL",
    "chrf",
    "layer_speedup",
    "batch_layer_speedup",
    "flops_speedup_decode",
]
SAME += ["kv_cache_bytes", "mean_output_tokens", "max_layers", "min_layers"]
HUNG_S = 1800  # a command that has not done what a test waits for by then hangs (no guess at its speed)


def quick(model_dirs, sweep_dataset, out, **kw):
    """8 settings (full, skip and exit at 2x, CALM at batch sizes 1 and 2), no timing: 8 units."""
    return sweep_config(model_dirs, sweep_dataset, out, **{"repeats": 0, **kw})


def wait_for(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def wait_for_first_row(out: Path, proc: subprocess.Popen) -> None:
    """Until the command has written a row to `out` (written atomically, so a row seen is whole), however long a
    loaded machine takes to start Ray's workers and load the model: the test waits on the row, not on a guess
    at how fast it comes. Fails at once, with what the command said, if it ends first; `HUNG_S` only keeps a
    command that hangs from holding the suite for ever."""
    deadline = time.monotonic() + HUNG_S
    while not (out.exists() and len(read_parquet(out)[0]) >= 1):
        if proc.poll() is not None:
            _, err = proc.communicate()
            pytest.fail(f"the sweep ended ({proc.returncode}) before writing a row:\n{err[-2000:]}")
        assert time.monotonic() < deadline, f"no row in {HUNG_S} s: the sweep hangs"
        time.sleep(0.2)


def free_cpus() -> float:
    import ray

    return ray.available_resources().get("CPU", 0.0)


# -- the same rows, wherever they ran ------------------------------------------------------------------------
@pytest.mark.parametrize("repeats", [0, 1])
def test_ray_gives_the_rows_and_ids_this_process_gives(
    model_dirs, sweep_dataset, tmp_path, ray_address, repeats
):
    cfg = quick(model_dirs, sweep_dataset, tmp_path / "here.parquet", repeats=repeats, timing_limit=2)
    here = run_sweep(cfg)
    there = run_sweep(replace(cfg, out=tmp_path / "ray.parquet"), executor=RayExecutor())
    assert len(here) == 8 and list(there["setting_id"]) == list(here["setting_id"])  # grid order, both
    pd.testing.assert_frame_equal(there[SAME], here[SAME])
    for df in (here, there):  # where each row ran
        assert df["host"].notna().all() and df["hardware"].str.len().gt(0).all()
        assert (df["torch_threads"] == 1).all()  # the task's 1 CPU here; the test process's 1 thread there
    trace, meta = read_trace(tmp_path / there["trace_path"].iloc[1])
    assert meta["setting_id"] == there["setting_id"].iloc[1] and len(trace)
    if repeats:  # timed: one task per batch size, its full-depth pairing with it
        assert there["wall_speedup_decode"].notna().all() and (there["timing_runs"] == 1).all()
        assert there.groupby("batch_size")["hardware"].nunique().eq(1).all()


def test_a_private_instance_listens_on_loopback_only(ray_address):
    import ray

    assert ray.util.get_node_ip_address() == "127.0.0.1" and ray_address.startswith("127.0.0.1:")
    pids = [os.getpid(), *descendants(os.getpid())]
    found = listening_addresses(pids)
    assert found, "no listening socket of the Ray processes was found"
    outside = [a for a in found if not a.is_loopback]
    assert not outside, outside


def test_a_private_instance_keeps_token_auth_and_starts_without_rays_warning():
    """Ray warns on every new local instance unless its auth mode is said; the instance skipcore starts says it:
    token, Ray's own default."""
    code = textwrap.dedent("""
        from skipcore.evaluate.sweep.ray_executor import start_local_ray
        start_local_ray(num_cpus=1, object_store_mb=80)
        from ray._private.authentication.authentication_utils import is_token_auth_enabled
        import ray
        print("token auth", is_token_auth_enabled())
        ray.shutdown()
    """)
    env = {k: v for k, v in python_env().items() if k != "RAY_AUTH_MODE"}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "token auth True" in run.stdout
    assert "Token authentication" not in run.stderr, run.stderr[-2000:]


def listening_addresses(pids: list[int]) -> list:
    """The local addresses of the TCP sockets `pids` listen on, from /proc (IPv4-mapped ones as IPv4)."""
    inodes = set()
    for pid in pids:
        try:
            links = [os.readlink(fd) for fd in Path(f"/proc/{pid}/fd").iterdir()]
        except OSError:
            continue
        inodes |= {link[8:-1] for link in links if link.startswith("socket:[")}
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                raw = bytes.fromhex(fields[1].split(":")[0])
                words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))  # host order per word
                addr = ipaddress.ip_address(words)
                out.append(getattr(addr, "ipv4_mapped", None) or addr)
    return out


# -- faults --------------------------------------------------------------------------------------------------
def flaky(marker: Path, how: str, after: int = 1):
    """unit_rows, but the first attempt at the batch-size-2 unit fails after `after` rows: it raises, or its
    worker dies; later attempts run normally."""
    real = units.unit_rows

    def rows_of(job, unit, engines, say=None):
        for i, item in enumerate(real(job, unit, engines, say)):
            if unit.batch_size == 2 and i == after and not marker.exists():
                marker.touch()
                if how == "die":
                    os._exit(1)
                raise RuntimeError("injected: fails once")
            yield item

    return rows_of


@pytest.mark.parametrize("how", ["raise", "die"])
def test_a_task_that_fails_once_is_retried_and_its_rows_appear_once(
    model_dirs, sweep_dataset, tmp_path, ray_address, monkeypatch, how
):
    monkeypatch.setattr(units, "unit_rows", flaky(tmp_path / "failed", how))
    failures = []
    cfg = quick(
        model_dirs, sweep_dataset, tmp_path / "s.parquet", repeats=1, timing_limit=2
    )  # a unit per batch size
    df = run_sweep(cfg, executor=RayExecutor(max_retries=1), on_failure=failures.append)
    assert (tmp_path / "failed").exists() and failures == []  # it did fail, and was retried
    assert len(df) == 8 and df["setting_id"].is_unique and (df["batch_size"] == 2).sum() == 4


def test_a_task_that_always_fails_is_named_in_one_line_and_the_rest_is_written(
    model_dirs, sweep_dataset, tmp_path, ray_address, monkeypatch, capsys
):
    real = units.unit_rows

    def broken(job, unit, engines, say=None):
        if unit.settings[0].mode == "exit":
            raise ValueError("injected: always\nsecond line")
        yield from real(job, unit, engines, say)

    monkeypatch.setattr(units, "unit_rows", broken)
    out = tmp_path / "s.parquet"
    args = ["sweep", "--model", str(model_dirs["opt"]), "--dataset", str(sweep_dataset), "--limit", "3"]
    args += ["--targets", "1,2", "--modes", "skip,exit", "--batch-sizes", "1", "--policies", "static"]
    args += ["--max-new-tokens", "10", "--device", "cpu", "--dtype", "float32", "--repeats", "0"]
    args += ["--out", str(out), "--no-progress", "--executor", "ray", "--ray-max-retries", "1"]
    assert main(args) == 1
    err = capsys.readouterr().err
    said = [line for line in err.splitlines() if line.startswith("error: setting")]
    assert said == [
        f"error: setting 'model b1 linear/exit x2' failed after 2 tries on {socket.gethostname()}: "
        "ValueError: injected: always"
    ]
    assert (
        "error: 1 setting of the grid failed for good, not written ('model b1 linear/exit x2'); the other 2 rows"
        in err
    )
    assert set(read_sweep(out)[0]["mode"]) == {"full", "skip"}  # the rest of the grid was written
    # as a library: an exception holding the failures and the rows; a rerun retries only the failed setting
    cfg = config_from_args(build_parser().parse_args(args))
    with pytest.raises(GridIncomplete) as caught:
        run_sweep(cfg, executor=RayExecutor(max_retries=0))
    [failure] = caught.value.failures
    assert [s.label() for s in failure.unwritten] == ["model b1 linear/exit x2"] and failure.tries == 1
    assert failure.reason == "ValueError: injected: always" and len(caught.value.frame) == 2
    # the rerun runs only the missing setting (here, in this process)
    monkeypatch.setattr(units, "unit_rows", real)
    ran = []
    evaluate = rows.evaluate_setting
    monkeypatch.setattr(rows, "evaluate_setting", lambda e, x, s, c: ran.append(s) or evaluate(e, x, s, c))
    assert main(args[: args.index("--executor")]) == 0
    assert [s.mode for s in ran] == ["exit"] and len(read_sweep(out)[0]) == 3


DRIVER = """
import json, os, signal, sys
from pathlib import Path
from skipcore.evaluate.sweep import RayExecutor, SweepConfig, run_sweep

kw = json.loads(sys.argv[1])
kw = {k: tuple(v) if isinstance(v, list) else v for k, v in kw.items()}
kw["out"] = Path(kw["out"])
done = []

def on_row(setting, row, result):  # the driver dies as soon as its second row is written
    done.append(setting)
    if len(done) == 2:
        os.kill(os.getpid(), signal.SIGKILL)

run_sweep(SweepConfig(**kw), on_row=on_row, executor=RayExecutor(address=sys.argv[2]))
"""


def python_env() -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}


def test_a_driver_killed_mid_grid_resumes_without_duplicates(
    model_dirs, sweep_dataset, tmp_path, ray_address
):
    out = tmp_path / "s.parquet"
    cfg = quick(model_dirs, sweep_dataset, out)
    kw = {k: v for k, v in vars(cfg).items() if k not in ("traces_dir", "sweep_run_id")}
    kw["out"] = str(out)
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    run = subprocess.run(
        [sys.executable, str(script), json.dumps(kw), ray_address],
        env=python_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == -signal.SIGKILL, run.stderr[-2000:]
    first, _ = read_sweep(out)
    assert len(first) == 2  # what the dead driver wrote is there, readable
    with pytest.warns(UserWarning, match="taking over"):  # its lock, left by a dead process
        df = run_sweep(cfg, executor=RayExecutor())
    assert len(df) == 8 and df["setting_id"].is_unique
    kept = df.set_index("setting_id").loc[first["setting_id"]]
    assert (kept["sweep_run_id"] == first["sweep_run_id"].iloc[0]).all()  # not made again
    assert (df["sweep_run_id"] == cfg.sweep_run_id).sum() == 6


def slowed(seconds: float):
    """unit_rows, but each unit takes `seconds` after its first row."""
    real = units.unit_rows

    def rows_of(job, unit, engines, say=None):
        for item in real(job, unit, engines, say):
            yield item
            time.sleep(seconds)

    return rows_of


def test_an_interrupted_driver_cancels_its_tasks_and_keeps_its_rows(
    model_dirs, sweep_dataset, tmp_path, ray_address, monkeypatch
):
    monkeypatch.setattr(units, "unit_rows", slowed(60))
    out = tmp_path / "s.parquet"

    def interrupt(setting, row, result):  # Ctrl-C as the first row is written
        raise KeyboardInterrupt

    cfg = quick(model_dirs, sweep_dataset, out)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(cfg, on_row=interrupt, executor=RayExecutor())
    assert len(read_sweep(out)[0]) == 1 and not out.with_name(f".{out.name}.lock").exists()
    assert wait_for(lambda: free_cpus() == 2, 20), "the interrupted tasks still hold their CPUs"


CLI = """
import signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)  # a shell's background job may start with it ignored
from skipcore.evaluate.sweep import units
real = units.unit_rows

def slow(job, unit, engines, say=None):  # a unit never ends after its first row: only Ctrl-C stops the grid
    for item in real(job, unit, engines, say):
        yield item
        time.sleep(24 * 3600)

units.unit_rows = slow
from skipcore.commands import build_parser, main
from skipcore.commands.sweep import config_from_args
sys.exit(main(sys.argv[1:]))
"""


def test_ctrl_c_on_the_command_line_stops_the_grid_and_keeps_written_rows(
    model_dirs, sweep_dataset, tmp_path, ray_address
):
    out = tmp_path / "s.parquet"
    script = tmp_path / "cli.py"
    script.write_text(textwrap.dedent(CLI))
    args = ["sweep", "--model", str(model_dirs["opt"]), "--dataset", str(sweep_dataset), "--limit", "3"]
    args += ["--targets", "1,2", "--modes", "skip", "--batch-sizes", "1,2", "--policies", "static"]
    args += ["--max-new-tokens", "10", "--device", "cpu", "--dtype", "float32", "--repeats", "0"]
    args += ["--out", str(out), "--no-progress", "--executor", "ray", "--ray-address", ray_address]
    proc = subprocess.Popen(
        [sys.executable, str(script), *args],
        env=python_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a terminal's Ctrl-C reaches it
    )
    try:
        wait_for_first_row(out, proc)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=HUNG_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130 and "error: interrupted" in err, err[-2000:]
    written = len(read_sweep(out)[0])
    assert 1 <= written < 4 and not out.with_name(f".{out.name}.lock").exists()


FAILING_CLI = """
import sys
from skipcore.evaluate.sweep import units

def broken(job, unit, engines, say=None):
    print("a worker's own line")
    raise ValueError("injected: always")
    yield  # a generator, as unit_rows is

units.unit_rows = broken
from skipcore.commands import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_grid_that_fails_keeps_rays_output_off_stdout_and_names_only_files_written(
    model_dirs, sweep_dataset, tmp_path, ray_address
):
    """A retried task's stack frames (what Ray reports to its driver) and a worker's own lines came out on stdout,
    where the results go; and a grid that wrote no row named result files that were never written. A driver of
    its own (a process that closes its Ray connection at the end), so that every line Ray sends it is seen."""
    out = tmp_path / "s.parquet"
    script = tmp_path / "cli.py"
    script.write_text(textwrap.dedent(FAILING_CLI))
    args = ["sweep", "--model", str(model_dirs["opt"]), "--dataset", str(sweep_dataset), "--limit", "3"]
    args += ["--targets", "1,2", "--modes", "skip", "--batch-sizes", "1", "--policies", "static"]
    args += ["--max-new-tokens", "10", "--device", "cpu", "--dtype", "float32", "--repeats", "0"]
    args += ["--out", str(out), "--no-progress", "--executor", "ray", "--ray-address", ray_address]
    args += ["--ray-max-retries", "1"]
    run = subprocess.run(
        [sys.executable, str(script), *args], env=python_env(), capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 1, run.stderr[-3000:]
    assert run.stdout == "" and "a worker's own line" not in run.stderr, (run.stdout, run.stderr[-3000:])
    said = run.stderr.splitlines()
    assert said[-2].startswith("0 settings written: no results file (") and not out.exists()
    assert said[-1].startswith("error: 2 settings of the grid failed for good, not written ('model b1 ")
    assert said[-1].endswith("); no row was written; rerun the same sweep to run only the missing ones")
    failed = [line.split("'")[1] for line in said if line.startswith("error: setting")]
    assert len(failed) == 2 and all(
        f"' failed after 2 tries on {socket.gethostname()}: ValueError: injected: always" in line
        for line in said
        if line.startswith("error: setting")
    )


# -- refused before any work ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "flags, said",
    [
        (["--ray-address", "127.0.0.1:1"], "--ray-address applies to --executor ray only"),
        (["--executor", "ray", "--ray-cpus-per-task", "0"], "--ray-cpus-per-task must be a number above 0"),
        (
            ["--executor", "ray", "--ray-cpus-per-task", "-0.5"],
            "--ray-cpus-per-task must be a number above 0",
        ),
        (["--executor", "ray", "--ray-gpus-per-task", "-1"], "--ray-gpus-per-task must be a number >= 0"),
        (["--executor", "ray", "--ray-max-retries", "-1"], "--ray-max-retries must be >= 0"),
        (
            ["--executor", "ray", "--device", "cuda"],
            "error: device cuda on Ray needs --ray-gpus-per-task above 0",
        ),
        (
            ["--executor", "ray", "--ray-address", "127.0.0.1:1"],
            "cannot reach the Ray cluster at 127.0.0.1:1",
        ),
        (["--executor", "ray", "--ray-address", "head-node"], "--ray-address must be HOST:PORT"),
    ],
)
def test_ray_flags_are_checked_before_any_work(model_dirs, sweep_dataset, tmp_path, capsys, flags, said):
    out = tmp_path / "s.parquet"
    args = ["sweep", "--model", str(model_dirs["opt"]), "--dataset", str(sweep_dataset), "--out", str(out)]
    assert main(args + flags) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and said in err[0], err
    assert not out.exists() and not (tmp_path / "s_traces").exists()


def test_the_ray_executors_settings_are_refused_by_their_own_names_from_python():
    from skipcore.errors import UserError

    for kw, said in (({"cpus_per_task": 0}, "cpus_per_task must be a number above 0, got 0"),
                     ({"gpus_per_task": -1}, "gpus_per_task must be a number >= 0, got -1"),
                     ({"max_retries": -1}, "max_retries must be >= 0, got -1")):  # fmt: skip
        with pytest.raises(UserError) as e:
            RayExecutor(**kw)
        assert str(e.value) == said and e.value.field == next(iter(kw))


def test_ray_missing_is_one_line_with_the_install_command(
    model_dirs, sweep_dataset, tmp_path, monkeypatch, capsys
):
    import importlib.util

    find = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "ray" else find(name, *a)
    )
    out = tmp_path / "s.parquet"
    args = ["sweep", "--model", str(model_dirs["opt"]), "--dataset", str(sweep_dataset), "--out", str(out)]
    assert main([*args, "--executor", "ray"]) == 2
    assert (
        capsys.readouterr().err
        == "error: the Ray executor needs Ray, an optional extra: pip install 'skipcore[ray]'\n"
    )
    assert not out.exists()


def test_a_task_no_node_can_hold_is_refused_on_a_private_instance(ray_address):
    import ray

    from skipcore.errors import UserError

    with pytest.raises(
        UserError,
        match=r"no Ray node can hold a task of 1 CPU and 1 GPU \(nodes have at most 2 CPUs, 0 GPUs\); lower "
        r"cpus_per_task or gpus_per_task, .* pass its address",
    ) as e:
        RayExecutor(gpus_per_task=1)._check_fits(ray, local=True)
    assert e.value.fields == ("cpus_per_task", "gpus_per_task", "address")  # the command line says its flags
    with pytest.warns(
        UserWarning,
        match=r"3 CPUs and 0 GPUs \(nodes have at most 2 CPUs\); lower --ray-cpus-per-task \(cpus_per_task\) .* "
        "unless the cluster's autoscaler",
    ):
        RayExecutor(cpus_per_task=3)._check_fits(ray, local=False)
    RayExecutor(cpus_per_task=2)._check_fits(ray, local=True)  # fits


@pytest.mark.parametrize(
    "flags, env, said",
    [
        (["--ray-address", ""], None, "error: --ray-address '' names no cluster: give HOST:PORT or auto"),
        ([], "127.0.0.1:1", "error: cannot reach the Ray cluster at 127.0.0.1:1 (from $RAY_ADDRESS) ("),
        (
            [],
            "head-node",
            "error: $RAY_ADDRESS must be HOST:PORT (as `ray start --head` prints it) or auto, got",
        ),
    ],
)
def test_a_ray_address_says_where_it_came_from(
    model_dirs, sweep_dataset, tmp_path, monkeypatch, capsys, flags, env, said
):
    """An unreachable address from $RAY_ADDRESS was said as if typed ('cannot reach the Ray cluster at bogus:1', or
    '--ray-address must be HOST:PORT' with no such flag given), and `--ray-address ''` started a private instance as
    if the flag were left out: each is one line that says where the address came from."""
    if env is None:
        monkeypatch.delenv("RAY_ADDRESS", raising=False)
    else:
        monkeypatch.setenv("RAY_ADDRESS", env)
    out = tmp_path / "s.parquet"
    args = ["sweep", "--model", str(model_dirs["opt"]), "--dataset", str(sweep_dataset), "--out", str(out)]
    assert main([*args, "--executor", "ray", *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(said), err
    assert not out.exists()
