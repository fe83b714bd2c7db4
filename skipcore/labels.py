"""What a setting is called on screen, written once: the sweep's rows and progress lines, its Markdown tables,
the dashboard and the notebooks all name a setting with `setting_label` (and write a byte count with
`human_bytes`).

A setting is anything with a sweep row's fields: a sweep grid's `Setting`, a row of `df.itertuples()`, a pandas
Series or a dict of a sweep table (a table written by another version, or by hand, may lack columns: a missing or
NaN field is simply left out). Pure string functions, no heavy imports.
"""

from __future__ import annotations

import math

FULL_DEPTH = "full depth"


def _field(setting: object, name: str, default: object = None) -> object:
    """A field of a setting, None where it is missing or NaN (a table's empty cell). A pandas Series (or a dict)
    is read by key: a Series' own attributes include `mode` and `shape`."""
    value = setting.get(name, default) if hasattr(setting, "keys") else getattr(setting, name, default)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return default
    return value


def _num(value: object) -> str:
    """3.0 -> '3', 0.25 -> '0.25': a number as a label writes it, whether a table stored it as int or float;
    '?' where the table lacks it."""
    return "?" if value is None else f"{float(value):g}"


def _schedule(setting: object) -> str:
    """A static schedule by its shape, mode and target speedup: 'linear/skip x3'."""
    target = _field(setting, "target_speedup")
    speed = f" x{_num(target)}" if target is not None else ""
    return f"{_field(setting, 'shape')}/{_field(setting, 'mode')}{speed}"


def setting_label(setting: object) -> str:
    """A sweep setting in a few words, the same wherever it is shown.

    'full depth'; a static schedule 'linear/skip x3'; CALM-DEC 'calm softmax>=0.8'; adaptive SkipDecode
    'adaptive max_prob>=0.3 drop 2 min 3'; speculative SkipDecode 'speculative k=4, draft linear/skip x3'; and
    transformers' own generate(): 'transformers generate()', 'transformers assistant_early_exit=4, k=2'.
    """
    policy = str(_field(setting, "policy", "static"))
    if policy == "static":
        if "full" in (_field(setting, "shape"), _field(setting, "mode")):
            return FULL_DEPTH
        return _schedule(setting)
    if policy == "calm":
        measure = _field(setting, "calm_measure")
        return f"calm {measure or ''}>={_num(_field(setting, 'calm_threshold'))}"
    if policy == "adaptive":
        signal = _field(setting, "adaptive_signal", "max_prob")
        op = ">=" if signal == "max_prob" else "<="
        return (
            f"adaptive {signal}{op}{_num(_field(setting, 'adaptive_threshold'))} "
            f"drop {_num(_field(setting, 'adaptive_drop'))} min {_num(_field(setting, 'adaptive_min_layers'))}"
        )
    if policy == "speculative":
        return f"speculative k={_num(_field(setting, 'draft_tokens'))}, draft {_schedule(setting)}"
    if policy == "transformers":
        exit_layer = _field(setting, "assistant_exit")
        if exit_layer is None:
            return "transformers generate()"
        return (
            f"transformers assistant_early_exit={_num(exit_layer)}, k={_num(_field(setting, 'draft_tokens'))}"
        )
    return policy


def human_bytes(n: float) -> str:
    """1536 -> '1.5 KiB': KV caches span bytes (tiny models) to GiB (real ones)."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # unreachable; keeps type checkers content
