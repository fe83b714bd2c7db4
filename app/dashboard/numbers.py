"""A chart's numbers as text, and a table as a CSV file: the one way every page offers them.

A chart is a picture: a screen reader says nothing of it and its numbers cannot be copied (WCAG 1.1.1 asks for a
text alternative). Each chart a reader takes numbers from has, beside it, an expander holding those numbers as a
table and as a CSV file (`figure_numbers`); `csv_button` is the CSV download every page's tables share.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

NUMBERS_CSV = "Download these numbers (CSV)"  # the label of every chart's numbers as a file


def csv_button(container, label: str, table: pd.DataFrame, file_name: str, key: str) -> None:
    """A download of `table` as CSV (no index column) in `container` (`st`, a column); a click reruns nothing."""
    container.download_button(
        label, table.to_csv(index=False), file_name, "text/csv", key=key, on_click="ignore"
    )


def numbers_table(table: pd.DataFrame, key: str, file_stem: str) -> None:
    """`table` as a data table (widget key `key`) and its CSV download (`{file_stem}.csv`, key `dl_{key}`)."""
    st.dataframe(table, hide_index=True, key=key)
    csv_button(st, NUMBERS_CSV, table, f"{file_stem}.csv", f"dl_{key}")


def figure_numbers(
    title: str, table: pd.DataFrame, key: str, file_stem: str, note: str | None = None
) -> None:
    """A chart's numbers beside it: an expander called `title` holding `note` (what the numbers are, where the
    table alone does not say) and `table` with its CSV (`numbers_table`)."""
    with st.expander(title):
        if note:
            st.caption(note)
        numbers_table(table, key, file_stem)
