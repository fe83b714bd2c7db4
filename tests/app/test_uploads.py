"""Files a user uploads to the dashboard are checked as the library reads them: a doubled trace is refused."""

from __future__ import annotations

import pandas as pd
import pytest

from skipcore.traces import TraceSchemaError


def test_the_dashboards_upload_refuses_a_doubled_trace(small_trace, tmp_path):
    from app.dashboard.tracefiles import read_uploaded_trace

    df, _ = small_trace
    doubled = tmp_path / "doubled.parquet"
    pd.concat([df, df], ignore_index=True).to_parquet(doubled)
    with pytest.raises(TraceSchemaError, match="appears more than once"):
        read_uploaded_trace("doubled.parquet", doubled.read_bytes(), 10**8)
