"""`RayExecutor`: a sweep's units of work as Ray tasks, on a cluster or on a private instance on this machine.

Ray schedules, retries and shows the tasks (its dashboard); this module only asks. One task per unit
(`skipcore.evaluate.sweep.units`: a (model, batch size) group when timed, a setting when not) requests the CPUs and
GPUs it needs and streams its rows back as each finishes (a Ray generator task); the driver, alone, writes them
(`skipcore.evaluate.sweep.runner`). A task that raises or whose worker dies is retried by Ray (`max_retries`,
exceptions included); one that fails for good becomes a `Failure` and the rest of the grid goes on. Ctrl-C (or any
error in the driver) cancels every task still running; rows already written stay, and a rerun resumes.

Ray is an optional extra (`pip install 'skipcore[ray]'`), imported only when a run starts. A private instance
listens on 127.0.0.1 only and reports no usage statistics. Nothing of Ray's reaches the driver's stdout, where a
command's results go: the workers' own output stays in Ray's log files (`/tmp/ray/session_latest/logs` on each
node), what Ray reports of them (a retried task's error) goes to stderr, and a unit that failed for good is said
in one line (`Failure.line`). On a cluster, the driver's `skipcore` is shipped to
the workers (Ray's `py_modules`), so every row is made by the same code; models are loaded by the workers from
the same path (a shared file system) or hub id, and the examples travel from the driver.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import math
import os
import socket
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

from skipcore.errors import SkipcoreWarning, UserError, first_line, quoted
from skipcore.evaluate.sweep.executors import Failure, FailureCallback
from skipcore.evaluate.sweep.rows import RowCallback
from skipcore.evaluate.sweep.settings import SweepConfig
from skipcore.evaluate.sweep.units import EngineCache, Say, SweepJob, WorkUnit

# Rows and traces are all that pass through Ray's object store (models load inside the tasks): a private
# instance needs little of it, and a small store keeps it from reserving a share of this machine's memory.
LOCAL_OBJECT_STORE_MB = 256
INSTALL = "pip install 'skipcore[ray]'"
# What the driver prints of Ray: its warnings, not every line its workers print (which Ray forwards to stdout)
RAY_LOGS = {"logging_level": logging.WARNING, "log_to_driver": False}

# the engine a worker process loaded last, kept for the next unit of the same model (CPU tasks reuse workers;
# a GPU task gets a fresh process, Ray's default, so its memory is returned when it ends)
_ENGINES = EngineCache()


def start_local_ray(num_cpus: int | None = None, object_store_mb: int = LOCAL_OBJECT_STORE_MB) -> None:
    """Start a private Ray instance on this machine: loopback only, no dashboard, no usage statistics, no worker
    logs on the driver's terminal (`RAY_LOGS`).

    Ray gives a new node the address of the machine's network interface unless it is told the machine stands
    alone, by a variable it reads when it is imported; where ray was imported before this, the instance
    listens where Ray chooses, which is said in one warning. Token authentication stays on, as Ray's default.
    """
    if "ray" not in sys.modules:
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        # Ray's default for a new local instance, said explicitly so that Ray does not warn about it on every
        # run (it reads the mode when it is imported, hence only here)
        os.environ.setdefault("RAY_AUTH_MODE", "token")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    ray.init(
        num_cpus=num_cpus,
        include_dashboard=False,
        object_store_memory=object_store_mb * 2**20,
        **RAY_LOGS,
    )
    ip = ray.util.get_node_ip_address()
    if ip not in ("127.0.0.1", "::1"):
        warnings.warn(
            f"the local Ray instance listens on {ip} (ray was imported before skipcore started it)",
            SkipcoreWarning,
            stacklevel=2,
        )


class UnitFailed(Exception):
    """A unit's error as raised in its worker, in one line, with the host it ran on (Ray's error keeps neither
    in a form that prints in one line)."""

    def __init__(self, host: str, reason: str) -> None:
        super().__init__(host, reason)
        self.host, self.reason = host, reason


FROM_ENVIRONMENT = " (from $RAY_ADDRESS)"  # said after an address the environment gave, not the caller


def _check_reachable(address: str, seconds: float = 10.0, source: str = "") -> None:
    """Refuse, in one line, a cluster address nothing answers at: Ray itself would wait for it for ever. `source`:
    where the address came from, said after it where it is not the caller's own (`FROM_ENVIRONMENT`)."""
    if address == "auto":  # Ray finds the cluster started on this machine, or says in one line there is none
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        said = "$RAY_ADDRESS" if source else "address"
        raise UserError(
            f"{said} must be HOST:PORT (as `ray start --head` prints it) or auto, got {quoted(address)}",
            field=() if source else "address",
        )
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=seconds).close()
    except OSError as e:
        raise UserError(
            f"cannot reach the Ray cluster at {address}{source} ({e.strerror or e}); is `ray start --head` running "
            "there?"
        ) from None


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


def _task(job: SweepJob, unit: WorkUnit, threads: int):
    """A unit's rows, in a Ray worker, each as (its setting's place in the unit, row, result): a setting that
    travelled does not compare equal to the driver's where it holds a NaN, so the driver takes its own back."""
    import torch
    from transformers.utils import logging as hf_logging

    torch.set_num_threads(threads)
    hf_logging.disable_progress_bar()  # a worker's output reaches the driver's terminal line by line
    try:
        for setting, row, result in job.evaluate(job, unit, _ENGINES):
            yield next(i for i, s in enumerate(unit.settings) if s is setting), row, result
    except Exception as e:
        raise UnitFailed(socket.gethostname(), _one_line(e)) from e


@dataclass
class RayExecutor:
    """Units as Ray tasks: on the cluster at `address` (else `$RAY_ADDRESS`, else a private instance on this
    machine), each asking `cpus_per_task` CPUs and `gpus_per_task` GPUs, retried `max_retries` times.

    A Ray connection that is already open (`ray.init` in a notebook) is used as it is and left open.
    """

    address: str | None = None
    cpus_per_task: float = 1.0
    gpus_per_task: float = 0.0
    max_retries: int = 3

    def __post_init__(self) -> None:
        if not (math.isfinite(self.cpus_per_task) and self.cpus_per_task > 0):
            raise UserError(
                f"cpus_per_task must be a number above 0, got {self.cpus_per_task:g}", field="cpus_per_task"
            )
        if not (math.isfinite(self.gpus_per_task) and self.gpus_per_task >= 0):
            raise UserError(
                f"gpus_per_task must be a number >= 0, got {self.gpus_per_task:g}", field="gpus_per_task"
            )
        if self.max_retries < 0:
            raise UserError(f"max_retries must be >= 0, got {self.max_retries}", field="max_retries")
        if self.address is not None and not self.address.strip():
            raise UserError(
                f"address {quoted(self.address)} names no cluster: give HOST:PORT or auto, or leave it out for "
                "$RAY_ADDRESS or a private instance on this machine",
                field="address",
            )

    def check(self, cfg: SweepConfig) -> None:
        if importlib.util.find_spec("ray") is None:
            raise UserError(f"the Ray executor needs Ray, an optional extra: {INSTALL}")
        address = self.cluster_address()
        if address is not None:
            _check_reachable(address, source=self._source())
        if cfg.device.startswith("cuda") and self.gpus_per_task == 0:
            raise UserError(
                f"device {cfg.device} on Ray needs gpus_per_task above 0 (a Ray task sees only the GPUs it asks for)",
                field="gpus_per_task",
            )

    def cluster_address(self) -> str | None:
        """The cluster to connect to (`address`, else $RAY_ADDRESS); None for a private instance."""
        address = self.address or os.environ.get("RAY_ADDRESS")
        return None if address in (None, "", "local") else address

    def _source(self) -> str:
        """Where the cluster's address came from, said after it: '' (the caller's), or the environment's."""
        return "" if self.address else FROM_ENVIRONMENT

    def threads(self, cfg: SweepConfig) -> int:
        """Torch threads of a task: --threads where given, else the CPUs it asked for."""
        return cfg.threads or max(1, int(self.cpus_per_task))

    @contextlib.contextmanager
    def session(self):
        """One Ray connection for several `run`s (a tune's rounds of trials): opened here unless one is open, and
        closed after, so a private instance starts once and its workers keep their models between runs."""
        with contextlib.redirect_stdout(sys.stderr):
            opened = self._connect()
        try:
            yield
        finally:
            if opened:
                import ray

                ray.shutdown()

    # -- the run ----------------------------------------------------------------------------------------------
    def run(
        self,
        job: SweepJob,
        units: list[WorkUnit],
        on_row: RowCallback,
        say: Say | None = None,
        on_failure: FailureCallback | None = None,
    ) -> list[Failure]:
        # Ray's driver threads print what its processes report (a retried task's stack frames) on stdout, where
        # a command's results go: on stderr while Ray runs here, until the connection opened here is closed
        with contextlib.redirect_stdout(sys.stderr):
            opened = self._connect()  # before ray is imported here: a private instance must see it first
            import ray

            try:
                self._check_fits(ray, local=opened == "local")
                return self._run(ray, job, units, on_row, say or (lambda _: None), on_failure)
            finally:
                if opened:
                    ray.shutdown()

    def _connect(self) -> str:
        """'' where Ray was already connected, 'local' after starting a private instance, else 'cluster'."""
        if "ray" in sys.modules and sys.modules["ray"].is_initialized():
            return ""
        address = self.cluster_address()
        if address is None:
            start_local_ray()
            return "local"
        import ray

        package = Path(__file__).resolve().parents[2]  # this skipcore, shipped to the workers
        code = {"py_modules": [str(package)], "excludes": ["__pycache__"]}
        try:
            ray.init(address=address, runtime_env=code, **RAY_LOGS)
        except (ConnectionError, RuntimeError, ValueError) as e:
            said = first_line(e)
            raise UserError(f"cannot connect to the Ray cluster at {address}{self._source()}: {said}") from e
        return "cluster"

    def _check_fits(self, ray, local: bool) -> None:
        """A task no node can hold would wait for ever: refused on a private instance (it has all it will
        have); said once on a cluster, whose autoscaler may still add such a node."""
        nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
        need = {"CPU": self.cpus_per_task, "GPU": self.gpus_per_task}
        if any(all(node.get(k, 0) >= v for k, v in need.items() if v) for node in nodes):
            return
        biggest = ", ".join(
            count(max((node.get(k, 0) for node in nodes), default=0), k) for k in need if need[k]
        )
        said = (
            f"no Ray node can hold a task of {count(self.cpus_per_task, 'CPU')} and {count(self.gpus_per_task, 'GPU')} "
            f"(nodes have at most {biggest}); lower {{cpus}} or {{gpus}}"
        )
        if local:  # the library's settings, which the command line says as its flags
            raise UserError(
                said.format(cpus="cpus_per_task", gpus="gpus_per_task")
                + ", or start a cluster that has them (`ray start --head`) and pass its address",
                field=("cpus_per_task", "gpus_per_task", "address"),
            )
        said = said.format(
            cpus="--ray-cpus-per-task (cpus_per_task)", gpus="--ray-gpus-per-task (gpus_per_task)"
        )
        warnings.warn(
            said + " unless the cluster's autoscaler adds such a node", SkipcoreWarning, stacklevel=2
        )

    def _run(
        self,
        ray,
        job: SweepJob,
        units: list[WorkUnit],
        on_row: RowCallback,
        say: Say,
        on_failure: FailureCallback | None,
    ) -> list[Failure]:
        from ray.exceptions import RayError

        task = ray.remote(
            num_cpus=self.cpus_per_task,
            num_gpus=self.gpus_per_task,
            max_retries=self.max_retries,
            retry_exceptions=True,
            num_returns="streaming",
        )(_task)
        shared, threads = ray.put(job), self.threads(job.cfg)
        pending = {task.remote(shared, unit, threads): unit for unit in units}
        written: dict[int, list] = {
            id(unit): [] for unit in units
        }  # each unit's settings whose row came back
        failures: list[Failure] = []
        try:
            while pending:
                say(f"{len(pending)} of {len(units)} Ray tasks left")
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
                for stream in ready:
                    unit = pending[stream]
                    try:
                        place, row, result = ray.get(next(stream))
                    except StopIteration:
                        del pending[stream]
                        continue
                    except RayError as e:  # failed for good: Ray has spent the retries
                        del pending[stream]
                        failures.append(self._failure(unit, written[id(unit)], e))
                        if on_failure is not None:
                            on_failure(failures[-1])
                        continue
                    written[id(unit)].append(unit.settings[place])
                    on_row(unit.settings[place], row, result)
        except BaseException:  # Ctrl-C, or a row that could not be written: stop what still runs
            for stream in pending:
                ray.cancel(stream, force=True)
            raise
        return failures

    def _failure(self, unit: WorkUnit, written: list, e: Exception) -> Failure:
        cause = getattr(e, "cause", None)  # what the task raised; none where its worker died
        said = cause if isinstance(cause, UnitFailed) else UnitFailed("", _one_line(cause or e))
        unwritten = tuple(s for s in unit.settings if s not in written)
        return Failure(unit, unwritten, said.reason, self.max_retries + 1, said.host)


def count(n: float, unit: str) -> str:
    """'1 CPU', '2 GPUs', '0 GPUs': a resource count with its unit."""
    return f"{n:g} {unit}{'s' if n != 1 else ''}"
