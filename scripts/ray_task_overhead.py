"""What Ray adds to a sweep, measured with tasks that do no work: start-up, a worker's first task, and the cost
per task, one at a time and many at once, each repeated, as a median with a bootstrap 95% interval.

A no-op task here has the sweep's shape (`skipcore.evaluate.sweep.ray_executor`): a generator task asking one CPU
that streams back a row and a trace of `--trace-rows` rows (the sweep's default is 32 examples x 64 tokens), so the
transfer is counted. Run it on a quiet machine:

    python scripts/ray_task_overhead.py                      # a private local instance with every CPU
    python scripts/ray_task_overhead.py --cpus 2 --tasks 200 --repeats 11
    python scripts/ray_task_overhead.py --address HOST:6379  # a running cluster
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np
import pandas as pd


def noop_unit(trace_rows: int):
    """One row and a trace of `trace_rows` rows, as a sweep task streams them back."""
    row = {f"column_{i}": float(i) for i in range(60)}
    trace = pd.DataFrame({f"c{i}": np.arange(trace_rows, dtype=float) for i in range(16)})
    yield 0, row, trace


def first_import():
    """What a sweep task imports in a fresh worker before its first row."""
    start = time.perf_counter()
    import torch  # noqa: F401
    import transformers  # noqa: F401

    import skipcore.evaluate.sweep.ray_executor  # noqa: F401

    yield time.perf_counter() - start


def median_interval(values: list[float], resamples: int = 2000) -> tuple[float, float, float]:
    draws = np.random.default_rng(0).choice(values, size=(resamples, len(values)))
    lo, hi = np.percentile(np.median(draws, axis=1), [2.5, 97.5])
    return float(np.median(values)), float(lo), float(hi)


def said(name: str, seconds: list[float], per: int) -> str:
    med, lo, hi = (1e3 * v / per for v in median_interval(seconds))
    return f"{name}: {med:.2f} ms per task [{lo:.2f}, {hi:.2f}] (median of {len(seconds)} repeats of {per} tasks)"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--address", help="a running Ray cluster (default: a private local instance)")
    p.add_argument("--cpus", type=int, help="CPUs of the private instance (default: all)")
    p.add_argument("--tasks", type=int, default=100, help="tasks per repeat (default: %(default)s)")
    p.add_argument(
        "--repeats", type=int, default=11, help="repeats of each measurement (default: %(default)s)"
    )
    p.add_argument(
        "--trace-rows", type=int, default=2048, help="rows of each task's trace (default: %(default)s)"
    )
    args = p.parse_args()

    from skipcore.evaluate.sweep.ray_executor import start_local_ray

    start = time.perf_counter()
    if args.address:
        import ray

        ray.init(address=args.address)
    else:
        start_local_ray(num_cpus=args.cpus)
        import ray
    started = time.perf_counter() - start
    task = ray.remote(num_cpus=1, num_returns="streaming")(noop_unit)
    imports = ray.remote(num_cpus=1, num_returns="streaming")(first_import)

    def one_at_a_time() -> float:
        t0 = time.perf_counter()
        for _ in range(args.tasks):
            for ref in task.remote(args.trace_rows):
                ray.get(ref)
        return time.perf_counter() - t0

    def all_at_once() -> float:
        t0 = time.perf_counter()
        streams = [task.remote(args.trace_rows) for _ in range(args.tasks)]
        for stream in streams:
            for ref in stream:
                ray.get(ref)
        return time.perf_counter() - t0

    cold = [ray.get(next(imports.remote())) for _ in range(3)]  # the first is a fresh worker's, then reused
    one_at_a_time(), all_at_once()  # warm-up: workers started, functions exported
    sequential, parallel = [], []
    for _ in range(args.repeats):  # alternated, so a slow spell of the machine hits both
        sequential.append(one_at_a_time())
        parallel.append(all_at_once())
    cpus = ray.cluster_resources().get("CPU", 0)
    print(
        f"Ray {ray.__version__}, {platform.processor() or platform.machine()}, {cpus:g} CPUs in the cluster"
    )
    print(
        f"start-up ({'connect' if args.address else 'private local instance'}): {started:.2f} s, once per sweep"
    )
    print(
        f"a worker's first task importing skipcore, torch and transformers: {cold[0]:.2f} s (then {min(cold):.3f} s)"
    )
    print(said("one task at a time, submit to its rows back", sequential, args.tasks))
    print(said(f"{args.tasks} tasks at once, wall time / tasks", parallel, args.tasks))
    ray.shutdown()


if __name__ == "__main__":
    main()
