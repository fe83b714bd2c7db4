"""A sweep's rows from a model already loaded: `setting_rows` evaluates settings one by one on an engine, in
whichever process holds it (this one, or a worker of `skipcore.evaluate.sweep.ray_executor`); `sweep_rows` is the
same with a callback (the dashboard's small sweeps). Neither writes a file: `skipcore.evaluate.sweep.runner` does.

Every row says where it ran: the host, the device and its hardware (`skipcore.models.loading.hardware_name`), and
the torch threads it had, because a wall-clock speedup means nothing without them and a grid may run on many
machines.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from skipcore.evaluate.sweep.grid import POLICY_GRID, check_settings
from skipcore.evaluate.sweep.settings import ModelFacts, Setting, SweepConfig

if TYPE_CHECKING:
    from skipcore.decode.engine import SkipEngine

RowCallback = Callable[[Setting, dict, object], None]  # (setting, row, generation result) once a row is done


def evaluate_setting(engine, examples, setting: Setting, cfg: SweepConfig) -> tuple[dict, object]:
    """One setting's row and its generation result (with its trace; None where the generator is not the loop's):
    quality and costs over every example, then the wall-clock speedups against full depth, paired and repeated
    on the first `cfg.timing_limit` prompts (with `cfg.repeats == 0`, no timing: those columns are NaN and
    `timing_runs` is 0)."""
    return POLICY_GRID[setting.policy].evaluate(engine, examples, setting, cfg)


def where_it_ran(engine) -> dict:
    """The row's provenance: model, host, device, dtype, hardware and the torch threads of this process."""
    import torch  # here, as the model code: a sweep's flags are built without them (--help)

    from skipcore.kernels.precision import dtype_name
    from skipcore.models.loading import hardware_name

    return {
        "model": engine.model_name,
        "device": str(engine.device),
        "dtype": dtype_name(engine.dtype),
        "attention_dtype": dtype_name(engine.kv_dtype),
        "hardware": hardware_name(engine.device),
        "host": socket.gethostname(),
        "torch_threads": torch.get_num_threads(),
        "num_layers": engine.num_layers,
    }


def setting_rows(
    engine,
    examples: list,
    grid: list[Setting],
    cfg: SweepConfig,
    on_start: Callable[[Setting], None] | None = None,
) -> Iterator[tuple[Setting, dict, object]]:
    """Each of `grid`'s settings of one model (loaded in `engine`), in order, as (setting, row, result) once done.

    Every row's measured speedups are paired with full depth at its own batch size (`evaluate_setting`).
    """
    check_settings(grid, ModelFacts.of_engine(engine), cfg)
    info = where_it_ran(engine)
    for s in grid:
        if on_start is not None:
            on_start(s)
        row, result = evaluate_setting(engine, examples, s, cfg)
        yield s, {**row, **info}, result


def sweep_rows(
    engine: SkipEngine,
    examples: list,
    grid: list[Setting],
    cfg: SweepConfig,
    on_row: RowCallback,
    on_start: Callable[[Setting], None] | None = None,
) -> None:
    """Evaluate `grid`'s settings of one model (already loaded in `engine`) in order, calling `on_row` for each.

    Writes no file and parses no flag: `run_sweep` adds the results file and traces, the dashboard a progress
    bar.
    """
    for s, row, result in setting_rows(engine, examples, grid, cfg, on_start):
        on_row(s, row, result)
