"""skipcore: batched, KV-cache-friendly layer skipping (SkipDecode) for decoder-only LMs.

Three lines to generate under the paper's schedule at a 3x target speedup, with a per-token trace::

    from skipcore import SkipEngine, load_model, schedule_for_speedup

    engine = SkipEngine(*load_model("data/models/skipdecode-opt-e2e"))
    schedule = schedule_for_speedup(engine.num_layers, 3.0, 26, decay_span=25)  # 3x over a 26-token output
    result = engine.generate(["MR: name[The Eagle], eatType[pub]\\nText:"], schedule, max_new_tokens=64)
    result.texts, result.trace, result.summary

Other policies go where the schedule goes: `CalmPolicy(threshold=0.8)` (CALM-DEC),
`AdaptivePolicy(min_layers=3)`, `SpeculativePolicy(schedule, draft_tokens=4)` (lossless: the schedule drafts,
full depth verifies). `run_sweep(SweepConfig(...))` runs quality-versus-speedup grids, in this process or as
Ray tasks (`run_sweep(cfg, executor=RayExecutor(address=...))`); `run_tune(TuneSettings(...))` searches for the
fastest schedule that keeps a quality floor on held-out data;
`read_trace`/`write_trace` handle trace files; `layer_lens` reads out every layer a token ran and
`compare_with_full_depth` measures a schedule's agreement with full depth. The command line (`python -m skipcore`, `skipcore`) is built on
these same calls.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from skipcore.lazy_exports import lazy_exports
from skipcore.version import __version__

# public name -> the module that defines it. Imported on first use (PEP 562), so `import skipcore` and the command
# line's `--help` do not pay for torch and transformers; `from skipcore import SkipEngine` works as before.
_EXPORTS: dict[str, str] = {
    "ModelShapes": "skipcore.adapters",
    "shapes_from_config": "skipcore.adapters",
    "SkipEngine": "skipcore.decode.engine",
    "GenerationResult": "skipcore.decode.outputs",
    "Sampling": "skipcore.decode.sampling",
    "DepthPolicy": "skipcore.decode.step",
    "ArgumentTypeError": "skipcore.errors",
    "ModelError": "skipcore.errors",
    "ScheduleError": "skipcore.errors",
    "UserError": "skipcore.errors",
    "InProcessExecutor": "skipcore.evaluate.sweep",
    "RayExecutor": "skipcore.evaluate.sweep",
    "SweepConfig": "skipcore.evaluate.sweep",
    "read_sweep": "skipcore.evaluate.sweep",
    "run_sweep": "skipcore.evaluate.sweep",
    "sweep_rows": "skipcore.evaluate.sweep",
    "TuneSettings": "skipcore.evaluate.tune",
    "run_tune": "skipcore.evaluate.tune",
    "LensResult": "skipcore.lens",
    "compare_with_full_depth": "skipcore.lens",
    "layer_lens": "skipcore.lens",
    "step_time_spread": "skipcore.measure.summary",
    "summarize": "skipcore.measure.summary",
    "load_model": "skipcore.models.loading",
    "AdaptivePolicy": "skipcore.policies",
    "CalmPolicy": "skipcore.policies",
    "SpeculativePolicy": "skipcore.policies",
    "StaticPolicy": "skipcore.policies",
    "Schedule": "skipcore.schedule",
    "full_schedule": "skipcore.schedule",
    "schedule_for_speedup": "skipcore.schedule",
    "TRACE_COLUMNS": "skipcore.traces",
    "TraceSchemaError": "skipcore.traces",
    "read_trace": "skipcore.traces",
    "validate_trace": "skipcore.traces",
    "write_trace": "skipcore.traces",
}

if TYPE_CHECKING:  # what type checkers and the API reference see
    from skipcore.adapters import ModelShapes, shapes_from_config
    from skipcore.decode.engine import SkipEngine
    from skipcore.decode.outputs import GenerationResult
    from skipcore.decode.sampling import Sampling
    from skipcore.decode.step import DepthPolicy
    from skipcore.errors import ArgumentTypeError, ModelError, ScheduleError, UserError
    from skipcore.evaluate.sweep import (
        InProcessExecutor,
        RayExecutor,
        SweepConfig,
        read_sweep,
        run_sweep,
        sweep_rows,
    )
    from skipcore.evaluate.tune import TuneSettings, run_tune
    from skipcore.lens import LensResult, compare_with_full_depth, layer_lens
    from skipcore.measure.summary import step_time_spread, summarize
    from skipcore.models.loading import load_model
    from skipcore.policies import AdaptivePolicy, CalmPolicy, SpeculativePolicy, StaticPolicy
    from skipcore.schedule import Schedule, full_schedule, schedule_for_speedup
    from skipcore.traces import TRACE_COLUMNS, TraceSchemaError, read_trace, validate_trace, write_trace


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())


__all__ = [
    "TRACE_COLUMNS",
    "AdaptivePolicy",
    "ArgumentTypeError",
    "CalmPolicy",
    "DepthPolicy",
    "GenerationResult",
    "InProcessExecutor",
    "LensResult",
    "ModelShapes",
    "RayExecutor",
    "Sampling",
    "ModelError",
    "Schedule",
    "ScheduleError",
    "SkipEngine",
    "SpeculativePolicy",
    "StaticPolicy",
    "SweepConfig",
    "TraceSchemaError",
    "TuneSettings",
    "UserError",
    "__version__",
    "compare_with_full_depth",
    "full_schedule",
    "layer_lens",
    "load_model",
    "read_sweep",
    "read_trace",
    "run_sweep",
    "run_tune",
    "schedule_for_speedup",
    "shapes_from_config",
    "step_time_spread",
    "summarize",
    "sweep_rows",
    "validate_trace",
    "write_trace",
]
