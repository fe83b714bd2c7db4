"""The palette's colours against the page the dashboard draws them on: a family's line, bar or marker (and a base
model's lighter shade) carries what a run is, so each must reach WCAG 2.1's 3:1 for graphical objects (1.4.11)
against the background. The dashboard has one theme: app/.streamlit/config.toml sets no dark base and its viewer
toolbar offers no theme switch (a dark system setting still draws white), so the background is white unless that
file names another."""

from __future__ import annotations

import pytest

from skipcore.labels import COLORS
from tests.helpers import REPO

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pytest's own TOML reader there
    import tomli as tomllib

THEME = REPO / "app" / ".streamlit" / "config.toml"
STREAMLIT_BACKGROUNDS = {"light": "#ffffff", "dark": "#0e1117"}  # Streamlit's own, where a theme names none
GRAPHICS = 3.0  # WCAG 2.1 1.4.11: a graphical object's contrast with what is next to it


def relative_luminance(color: str) -> float:
    """WCAG 2.1's relative luminance of '#rrggbb'."""
    channels = [int(color[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def contrast(a: str, b: str) -> float:
    """WCAG 2.1's contrast ratio of two colours, 1 to 21."""
    light, dark = sorted((relative_luminance(a), relative_luminance(b)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


def backgrounds() -> set[str]:
    """The backgrounds the dashboard's theme draws figures on: its own colour, else its base's (light)."""
    theme = tomllib.loads(THEME.read_text()).get("theme", {})
    return {theme.get("backgroundColor") or STREAMLIT_BACKGROUNDS[theme.get("base", "light")]}


def test_contrast_is_wcags_ratio():
    assert contrast("#000000", "#ffffff") == pytest.approx(21.0)
    assert contrast("#767676", "#ffffff") == pytest.approx(4.54, abs=0.01)  # the web's known 4.5:1 grey
    assert backgrounds() == {"#ffffff"}


def test_every_palette_colour_stands_out_from_the_background():
    """The palette (`skipcore.labels.COLORS`) had light shades of 1.5-2.1:1 and some families' own colours of
    2.6-2.7:1 (full depth, speculative, transformers' early exit)."""
    low = {
        f"{family} ({'model' if shade == 0 else 'base model'}) {color} on {background}": round(ratio, 2)
        for background in backgrounds()
        for family, pair in COLORS.items()
        for shade, color in enumerate(pair)
        if (ratio := contrast(color, background)) < GRAPHICS
    }
    assert not low, low
