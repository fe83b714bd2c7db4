"""Figures saved from Python as PNG or SVG, offline: a Plotly figure through kaleido, which drives a Chromium
(Debian's `chromium` is found on the PATH; `BROWSER_PATH` names another), an Altair chart through vl-convert, which
needs no browser. The dashboard's camera buttons save the same figures from the browser.

Both exporters are libraries (kaleido is Plotly's own; vl-convert is the Vega project's), so nothing here renders;
it picks the exporter for the figure's kind, says in one line what is missing, and replaces the file atomically.
"""

from __future__ import annotations

from pathlib import Path

from skipcore.errors import UserError, first_line
from skipcore.files import atomic_write

FORMATS = ("png", "svg")


def figure_bytes(fig: object, fmt: str = "png", scale: float = 2.0) -> bytes:
    """The figure rendered as PNG or SVG bytes (`scale` multiplies a PNG's pixels, for sharp slides)."""
    if fmt not in FORMATS:
        raise UserError(f"cannot save a figure as {fmt!r}; choose one of {', '.join(FORMATS)}")
    if hasattr(fig, "to_image") and hasattr(fig, "to_plotly_json"):
        return _plotly_bytes(fig, fmt, scale)
    if hasattr(fig, "to_json") and hasattr(fig, "to_dict") and type(fig).__module__.startswith("altair"):
        return _altair_bytes(fig, fmt, scale)
    raise UserError(f"cannot save a {type(fig).__name__}: a Plotly figure or an Altair chart is expected")


def save_figure(fig: object, path: str | Path, scale: float = 2.0) -> Path:
    """Write a Plotly figure or an Altair chart to `path` (.png or .svg); the file is replaced atomically."""
    out = Path(path)
    fmt = out.suffix.lower().removeprefix(".")
    if fmt not in FORMATS:
        raise UserError(f"{out}: a figure is saved as .png or .svg")
    if not out.parent.is_dir():
        raise UserError(f"{out}: the folder {out.parent} does not exist")
    data = figure_bytes(fig, fmt, scale)
    atomic_write(out, lambda tmp: tmp.write_bytes(data))
    return out


def _plotly_bytes(fig, fmt: str, scale: float) -> bytes:
    try:
        import kaleido  # noqa: F401 (plotly finds it; asked here to say what is missing in one line)
    except ImportError:
        raise UserError("saving a Plotly figure needs kaleido: pip install kaleido==1.5.0") from None
    try:
        return fig.to_image(format=fmt, scale=scale)
    except Exception as e:  # noqa: BLE001 (kaleido's browser errors have no common base; all mean one thing)
        first = first_line(e)
        raise UserError(
            "saving a Plotly figure needs a Chromium for kaleido (apt-get install chromium, or set BROWSER_PATH "
            f"to a Chrome/Chromium): {first}"
        ) from e


def _altair_bytes(chart, fmt: str, scale: float) -> bytes:
    try:
        import vl_convert
    except ImportError:
        raise UserError(
            "saving an Altair chart needs vl-convert: pip install vl-convert-python==1.9.0.post1"
        ) from None
    spec = chart.to_json()
    if fmt == "svg":
        return vl_convert.vegalite_to_svg(spec).encode()
    return vl_convert.vegalite_to_png(spec, scale=scale)


def charts_offline() -> None:
    """Show Altair charts in a notebook with Vega's JavaScript inside each chart (about 0.9 MB of it, through
    vl-convert), so they draw with no network, as the Plotly figures do: Altair's default HTML loads Vega from a
    CDN, and JupyterLab's own Vega renderer reads Vega-Lite 5, not the 6 that Altair writes. The charts keep their
    tooltips; a notebook saved with them holds the script once per chart."""
    import altair as alt

    alt.renderers.enable("html", template="inline")
