"""The dtypes the decode attention can run in, as the command line names them (`--attention-dtype`), in a module
of their own that imports no torch: the flag is built from them when --help asks, before any model code is
needed. `skipcore.kernels.attention.attention_dtype_for` maps each to a torch dtype."""

from __future__ import annotations

ATTENTION_DTYPES = ("model", "float32")  # what `attention_dtype_for` takes, as the command line names them
