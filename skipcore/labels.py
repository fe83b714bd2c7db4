"""What a setting or a run is called and which colour it has, written once: the sweep's rows and progress lines,
its Markdown tables, the dashboard and the notebooks name a setting with `setting_label` and a run with
`run_label` (everything that made it: model, schedule or policy with every parameter, decoding; `file_stem` is
the same name as a file name), and every figure colours a setting family (a static schedule's mode, or the
policy) with `COLORS`, through `series_colors` (a sweep's series) or `run_family` (a run). A byte count is
written with `human_bytes`, a count with its noun with `counted`.

A setting is anything with a sweep row's fields: a sweep grid's `Setting` (by its `to_dict`), a row of
`df.itertuples()`, a pandas Series or a dict of a sweep table (a table written by another version, or by hand,
may lack columns: a missing or NaN field is simply left out). A policy's parameters are named as the policy
declares them (`skipcore.policies.params`). Pure string functions, no heavy imports.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from skipcore.policies.params import short_number

FULL_DEPTH = "full depth"
# what a run's name says where its metadata does not record the schedule or the decoding
UNKNOWN_SCHEDULE = "schedule ?"
UNKNOWN_DECODING = "decoding ?"
MODEL_ROLE = "model"  # a sweep's model (its `model_role`); any other role is a baseline model
# how a sweep's `model_role` reads in a legend: the model is named by its name alone, the baseline (the same network
# before skip-aware training, by the sweep's convention) as a base model, never "baseline" (read as full depth)
ROLE_WORDS = {MODEL_ROLE: "", "baseline": "base model"}

# THE palette: one hue per setting family, (the model's rows, a baseline model's rows: the same hue, lighter).
# Its order is the order in which names that are no family (models, runs, batches) take the hues left free. Every
# shade is at least 3:1 on the dashboard's white (WCAG 2.1 1.4.11: a line, bar or marker carries what a run is;
# tests/app/test_palette_contrast.py), and the families' own colours stay apart under simulated protanopia and
# deuteranopia (Machado 2009, in OKLab: at least 6.9 apart, where exit's red and middle's green had been 1.2).
COLORS: dict[str, tuple[str, str]] = {
    "skip": ("#1f4e9c", "#1e5ed5"),  # SkipDecode: warmup layers, then the top of the stack
    "exit": ("#af033c", "#e45f66"),  # early exit: the first n layers
    "middle": ("#1d5b3f", "#029862"),  # middle skipping: the first and last layers
    "calm": ("#712d76", "#8d419d"),  # CALM-DEC
    "adaptive": ("#166f7c", "#3e8297"),  # adaptive SkipDecode
    "speculative": ("#a25502", "#b96711"),  # speculative SkipDecode
    "transformers": ("#763d01", "#7d5e4b"),  # transformers' generate()
    "transformers early exit": ("#957c44", "#c38609"),  # generate(assistant_early_exit=n)
    "full": ("#7f7f7f", "#939393"),  # full depth
}
FAMILY_OF = {FULL_DEPTH: "full", "static": "skip"}  # other names a family goes by in tables and figures


def _field(setting: object, name: str, default: object = None) -> object:
    """A field of a setting, None where it is missing or NaN (a table's empty cell). A pandas Series (or a dict)
    is read by key: a Series' own attributes include `mode` and `shape`."""
    value = setting.get(name, default) if hasattr(setting, "keys") else getattr(setting, name, default)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return default
    return value


def sweep_policies() -> dict[str, type]:
    """Every entry a sweep setting can name, by name: the loop's policies and transformers' own generate(). Each
    declares its parameters (`skipcore.policies.params`) and says its settings in words (`setting_words`)."""
    from skipcore.policies import POLICY_CLASSES
    from skipcore.policies.assisted import AssistedGeneration

    return {**POLICY_CLASSES, AssistedGeneration.name: AssistedGeneration}


def _schedule(setting: object) -> str:
    """A static schedule by its shape, mode and target speedup, 'linear/skip x3', and skip mode's warmup layers
    where they are not the schedule's default ('linear/skip x3 warmup 2': two such rows of a sweep are two
    settings)."""
    target = _field(setting, "target_speedup")
    speed = f" x{short_number(target)}" if target is not None else ""
    mode, warmup = _field(setting, "mode"), _field(setting, "warmup")
    warm = f" {warmup_words(warmup)}" if mode == "skip" and warmup not in (None, _default_warmup()) else ""
    return f"{_field(setting, 'shape')}/{mode}{speed}{warm}"


def warmup_words(warmup: object) -> str:
    """Skip mode's warmup layers in a setting's words: 'warmup 2'."""
    return f"warmup {int(warmup)}"


def _default_warmup() -> int:
    """Skip mode's warmup layers where a schedule says none (`Schedule.warmup_layers`, declared there)."""
    from skipcore.schedule import Schedule

    return Schedule.__dataclass_fields__["warmup_layers"].default


def setting_label(setting: object) -> str:
    """A sweep setting in a few words, the same wherever it is shown.

    'full depth'; a static schedule 'linear/skip x3' ('linear/skip x3 warmup 2' off the default warmup); CALM-DEC
    'calm softmax>=0.8'; adaptive SkipDecode
    'adaptive max_prob>=0.3 drop 2 min 3'; speculative SkipDecode 'speculative k=4, draft linear/skip x3'; and
    transformers' own generate(): 'transformers generate()', 'transformers assistant_early_exit=4, k=2'. Each
    policy words its own parameters (`setting_words`), read from the setting by their columns.
    """
    from skipcore.policies.params import params_of

    if hasattr(setting, "to_dict"):  # a grid's Setting: its parameters by column
        setting = setting.to_dict()
    policy = str(_field(setting, "policy", "static"))
    if policy == "static":
        if "full" in (_field(setting, "shape"), _field(setting, "mode")):
            return FULL_DEPTH
        return _schedule(setting)
    cls = sweep_policies().get(policy)
    if cls is None:
        return policy
    words = cls.setting_words({p.name: _field(setting, p.column) for p in params_of(cls)})
    return f"{words}, draft {_schedule(setting)}" if policy == "speculative" else words


def trial_label(trial: int, label: str, model: object = None) -> str:
    """A tune's row in words, wherever its trials are shown: 'trial 3: linear 12->4 (skip, warmup 1, span 52)' (its
    Optuna trial and its schedule's own words, the tune's `tune_label`), or its full depth 'full depth (model)'
    ('full depth' where the table names no model: a tune's front.csv)."""
    if trial >= 0:
        return f"trial {int(trial)}: {label}"
    return FULL_DEPTH if model is None or model != model else f"{FULL_DEPTH} ({model_label(model)})"


# -- a run: one generate call, named by everything that made it ----------------------------------------------
SEP = " · "  # between the parts of a run's name


def model_label(model: object) -> str:
    """A model as a run's name says it: a folder or a .gguf file by its last part ('skipdecode-opt-e2e'), a real
    model's short name or a hub id's model as it is named."""
    text = str(model or "?").replace("\\", "/").rstrip("/")
    return text.rsplit("/", 1)[-1] or text


def decoding_label(sampling: object = None) -> str:
    """'greedy', or 'sampled (temperature 0.7, top-k 50, top-p 0.9, seed 3)': a `skipcore.Sampling`, the run
    metadata's `sampling` dict, None (greedy) or these words already."""
    if isinstance(sampling, str):
        return sampling
    if not _field(sampling, "do_sample", False):
        return "greedy"
    return (
        f"sampled (temperature {short_number(_field(sampling, 'temperature', 1.0))}, "
        f"top-k {short_number(_field(sampling, 'top_k', 0))}, top-p {short_number(_field(sampling, 'top_p', 1.0))}, "
        f"seed {short_number(_field(sampling, 'seed', 0))})"
    )


def _schedule_words(schedule: object) -> str:
    """A schedule (a `Schedule`, its dict as run metadata keeps it, or words) in its own words (`Schedule.describe`); a
    dict this version cannot read as a schedule (a file written by hand or by another tool) by its fields."""
    from skipcore.errors import UserError
    from skipcore.schedule import Schedule

    if schedule is None:
        return FULL_DEPTH
    if isinstance(schedule, str):  # these words already (`UNKNOWN_SCHEDULE`)
        return schedule
    if not isinstance(schedule, Schedule):
        try:
            schedule = Schedule.from_record(dict(schedule))
        except (UserError, TypeError, ValueError):
            fields = schedule.items() if hasattr(schedule, "items") else []
            return "schedule " + (", ".join(f"{k} {v}" for k, v in fields if v not in (None, [], "")) or "?")
    return schedule.describe()


def policy_words(
    policy: str | None, params: object = None, schedule: object = None, mode: str | None = None
) -> str:
    """What chose each token's layers, with every parameter: a static schedule's own words
    (`Schedule.describe`), or a policy's (`setting_words`, from its parameters by column as run metadata keeps
    them) with what it takes from a schedule: speculative SkipDecode its draft schedule, adaptive SkipDecode the
    mode (and warmup layers) its budgets map to."""
    from skipcore.policies.params import params_of

    policy = str(policy or "static")
    sets = _field(params or {}, "layer_sets") if mode == "layer_sets" else None
    if policy == "static" and sets is not None:  # explicit layer sets, no schedule: their own words
        from skipcore.decode.static_policy import layer_sets_words

        return layer_sets_words(sets)
    if policy == "static":
        return _schedule_words(schedule)
    cls = sweep_policies().get(policy)
    if cls is None:
        return policy
    params = params or {}
    words = cls.setting_words(
        {p.name: _field(params, p.column, _field(params, p.name)) for p in params_of(cls)}
    )
    if policy == "speculative":
        return f"{words}, draft {_schedule_words(schedule)}"
    mode = mode or _field(schedule or {}, "mode")
    if mode and getattr(cls, "uses_schedule", False):  # adaptive: its budgets are laid out by the mode
        warmup = _field(params, "warmup_layers", _field(schedule or {}, "warmup_layers"))
        words += f" ({mode}{f', warmup {warmup}' if mode == 'skip' and warmup is not None else ''})"
    return words


def run_label(
    model: object,
    schedule: object = None,
    policy: str | None = "static",
    params: object = None,
    sampling: object = None,
    mode: str | None = None,
) -> str:
    """A run by everything that made it, the same on every page, legend, table, file name and figure title:
    'skipdecode-opt-e2e · linear 12->2 (skip, warmup 1, span 25) · greedy',
    'smollm2-135m · calm softmax>=0.9 · sampled (temperature 0.7, top-k 0, top-p 1, seed 0)'.
    Two runs whose model, layers or decoding differ never share a name. `metadata_label` reads the parts from a
    trace's run metadata."""
    return SEP.join(
        (model_label(model), policy_words(policy, params, schedule, mode), decoding_label(sampling))
    )


def design_label(model: object, schedule: object) -> str:
    """A schedule designed for a model, before any run (no decoding yet): 'skipdecode-opt-e2e · linear 12->2
    (skip, warmup 1, span 25)'; a run of it is named by `run_label`, which starts with the same words."""
    return SEP.join((model_label(model), policy_words("static", None, schedule)))


def metadata_label(meta: object) -> str:
    """`run_label` of a trace's run metadata (`skipcore.traces.schema`): its model, policy, schedule, parameters
    and sampling, as every generate call records them. Metadata that does not say them (a file made by hand or by
    another tool) is named by what it says: 'schedule ?' where it records no schedule key and no mode of full
    depth, 'decoding ?' where it records no sampling. A static run of explicit layer sets (mode `layer_sets`, no
    schedule) is named by its sets (`policy_words`)."""
    meta = meta or {}
    present = set(meta.keys()) if hasattr(meta, "keys") else {"schedule", "sampling"}
    recorded = "schedule" in present or _field(meta, "mode") == "full"
    return run_label(
        _field(meta, "model"),
        _field(meta, "schedule") if recorded else UNKNOWN_SCHEDULE,
        _field(meta, "policy", "static"),
        _field(meta, "policy_params"),
        _field(meta, "sampling") if "sampling" in present else UNKNOWN_DECODING,
        _field(meta, "mode"),
    )


def file_stem(label: str, limit: int = 120) -> str:
    """A name as a file name: 'skipdecode-opt-e2e · linear 12->2 (skip, warmup 1)' ->
    'skipdecode-opt-e2e_linear-12-2-skip-warmup-1' (letters, digits, '.', '=', '-' and '_' only); a policy's rule
    keeps its sense in words ('calm softmax>=0.9' -> 'calm-softmax-ge-0.9': a file name has no '>'). Past `limit`
    characters the longest part is cut first, so each part keeps its start and a short one (a sampled run's
    decoding, its seed at the end) stays whole where a long model path is cut."""
    parts = []
    label = str(label).replace(">=", " ge ").replace("<=", " le ").replace("×", "x")  # '12×3': held 3 steps
    for part in label.split(SEP):
        kept = "".join(c if c.isascii() and (c.isalnum() or c in ".=") else "-" for c in part)
        parts.append("-".join(w for w in kept.split("-") if w))
    parts = [p for p in parts if p]
    while len("_".join(parts)) > limit and max(map(len, parts)) > 1:  # each turn shortens the longest part
        longest = max(range(len(parts)), key=lambda i: len(parts[i]))
        over = len("_".join(parts)) - limit
        cut = parts[longest][: max(1, len(parts[longest]) - over)].rstrip("-_.")
        parts[longest] = cut or parts[longest][0]
    return "_".join(parts)[:limit].rstrip("-_.") or "run"


def run_family(policy: object = "static", mode: object = None, schedule: object = None) -> str:
    """The palette family a run belongs to, which gives its colour (`COLORS`): full depth, a static schedule's
    mode (skip, exit, middle) or the policy."""
    policy = str(policy or "static")
    if policy != "static":
        return policy if policy in COLORS else "full"
    shape = _field(schedule or {}, "shape")
    mode = str(mode or _field(schedule or {}, "mode") or "full")
    return "full" if schedule is None or shape == "full" or mode == "full" else mode


# a table column as an axis, legend or table heading says it: in words, not the column's name
COLUMN_TITLES: dict[str, str] = {
    "layer_speedup": "layer speedup (realised)",
    "layer_speedup_token_mean": "layer speedup (mean per token)",
    "batch_layer_speedup": "layer speedup per batch step",
    "flops_speedup_decode": "FLOPs speedup (decode)",
    "flops_speedup_with_prompt": "FLOPs speedup (with the prompt)",
    "batch_flops_speedup_decode": "FLOPs speedup per batch step (decode)",
    "target_speedup": "target layer speedup",
    "schedule_speedup": "schedule layer speedup",
    "wall_speedup_decode": "measured decode speedup vs full depth",
    "wall_speedup_total": "measured end-to-end speedup vs full depth",
    "wall_speedup": "measured speedup vs full depth",
    "wall_speedup_of": "measured over",
    "bleu": "BLEU",
    "rougeL": "ROUGE-L",
    "rouge1": "ROUGE-1",
    "rouge2": "ROUGE-2",
    "chrf": "chrF",
    "slot_name": "name copied verbatim (% of outputs)",
    "slot_near": "'near' copied verbatim (% of outputs with one)",
    "slot_all": "every slot value copied (% of outputs)",
    "series": "policy or mode",
    "model_role": "model role",
    "batch_size": "batch size",
    "tokens_per_s": "tokens per second",
    "tokens_per_full_pass": "tokens per full-depth pass",
    "draft_acceptance": "drafts accepted",
    "draft_target": "draft schedule's target",
    "kv_saved_fraction": "KV cache saved",
    "decode_ms_per_step": "ms per decode step",
    "mean_layers_run": "mean layers run",
    "num_layers_run": "layers run",
    "max_layers": "max layers",
    "min_layers": "min layers",
    "timing_flag": "timing flag",
    "tune_trial": "trial",  # a tune's trial number (-1: full depth, the floor's reference)
    "tune_label": "setting",
}


def column_title(column: str) -> str:
    """'layer_speedup' -> 'layer speedup (realised)': a column in words (a policy parameter's column by its
    declared title; any other name with its underscores as spaces; an interval's ends as '... low/high')."""
    titles = {**_parameter_titles(), **COLUMN_TITLES}
    for end, said in (("_lo", " (95% low)"), ("_hi", " (95% high)")):
        if column.endswith(end) and column[: -len(end)] in titles:
            return titles[column[: -len(end)]] + said
    return titles.get(column, column.replace("_", " "))


def _parameter_titles() -> dict[str, str]:
    from skipcore.policies.params import params_of

    return {p.column: p.title for cls in sweep_policies().values() for p in params_of(cls)}


def role_suffix(role: object) -> str:
    """What a series name carries for a model role: '' for the model, ' · base model' for the baseline."""
    words = ROLE_WORDS.get(str(role), str(role))
    return f" · {words}" if words else ""


def repeated_note(values: Sequence[object], flag: str) -> str | None:
    """'note: --batch-sizes names 2 more than once; each setting runs once' where `values` repeats one (a grid or
    a plan runs each value once: the repeat is dropped, and said), else None."""
    repeated = [v for v in dict.fromkeys(values) if list(values).count(v) > 1]
    if not repeated:
        return None
    said = ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in repeated)
    return f"note: {flag} names {said} more than once; each setting runs once"


def counted(n: int, noun: str) -> str:
    """'1 example', '3 examples': a count with its noun (a regular plural)."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def human_bytes(n: float) -> str:
    """1536 -> '1.5 KiB', 551,000 -> '538 KiB': three significant digits at most (KV caches span bytes, for tiny
    models, to GiB, for real ones; a metric's box has room for a short number)."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" or abs(n) >= 999.5 else f"{n:.3g} {unit}"
        n /= 1024
    return f"{n:.3g} TiB"  # unreachable; keeps type checkers content


def _family(name: str) -> str | None:
    """The palette family a series name belongs to ('skip · power' is 'skip'), or None."""
    head = name.split(" · ")[0]
    head = FAMILY_OF.get(head, head)
    return head if head in COLORS else None


def series_colors(names: Sequence[object], roles: Sequence[object] | None = None) -> dict[object, str]:
    """A colour for each distinct name of a figure's series, from `COLORS`.

    A name of a family ('skip', 'calm', 'full depth', 'skip · power') takes its family's hue; `roles` (each
    name's `model_role`, where a table has several models) makes a baseline model's rows the light shade of the
    model's hue, its name carrying the role ('skip · base model'). A second name of one family (another shape) and
    names of no family (models, runs, batches) take the hues this figure leaves free, in palette order, then
    their light shades: twice as many names as free hues before two share a colour.
    """
    roles = [MODEL_ROLE] * len(names) if roles is None else roles
    items = list(dict.fromkeys(zip(names, roles, strict=True)))
    own = {item: _without_role(str(item[0]), str(item[1])) for item in items}
    hues: dict[str, tuple[str, str]] = {}
    for name in own.values():  # families claim their own hue first, so no other name takes it
        family = _family(name)
        if family is not None and name not in hues and COLORS[family] not in hues.values():
            hues[name] = COLORS[family]
    free = [hue for hue in COLORS.values() if hue not in hues.values()] or list(COLORS.values())
    # names past the free hues' first round: their light shade, so no two names share one
    light: set[str] = set()
    for name in own.values():
        if name not in hues:
            taken = sum(hue in free for hue in hues.values())
            hues[name] = free[taken % len(free)]
            if taken // len(free) % 2:
                light.add(name)
    return {
        name: hues[own[(name, role)]][(role != MODEL_ROLE) != (own[(name, role)] in light)]
        for name, role in items
    }


def _without_role(name: str, role: str) -> str:
    return name if role == MODEL_ROLE else name.removesuffix(role_suffix(role))
