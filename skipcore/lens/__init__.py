"""The layer lens: for every generated token and every layer, what the model would predict if it stopped
there, along the layers the token actually ran (design notes, "Layer lens").

- `run`: `layer_lens`, the decode (the engine's own loop, or teacher-forced on given tokens) plus the replay.
- `replay`: the read-outs, step by step with the decode's own cache and masks.
- `forcing`: teacher forcing through the decode loop.
- `summary`: agreement with full depth (per step and per budget), per-layer summaries.
- `files`: lens tables on disk, with the run metadata, like traces.

Its figures (the token x layer heatmap, the per-layer and agreement figures) are in `skipcore.plots.lens`, with
the other figures the dashboard and the notebooks share.
"""

from skipcore.lens.files import LENS_COLUMNS, read_lens, write_lens
from skipcore.lens.run import LensResult, layer_lens
from skipcore.lens.summary import (
    Agreement,
    FullDepthComparison,
    agreement,
    compare_with_full_depth,
    layer_summary,
)

__all__ = [
    "LENS_COLUMNS",
    "Agreement",
    "FullDepthComparison",
    "LensResult",
    "agreement",
    "compare_with_full_depth",
    "layer_lens",
    "layer_summary",
    "read_lens",
    "write_lens",
]
