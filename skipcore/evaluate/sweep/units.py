"""The unit of a sweep's work: what must stay on one device for honest numbers, and running one in any process.

A timed grid is cut into one unit per (model, batch size): every measured speedup of that group is paired with
full depth on the same hardware, in the same process, so the group's rows share one machine and can share one
front. Without timing (`repeats=0`) outputs do not depend on where they ran, and each setting is a unit of its
own. `unit_rows` runs one unit wherever it is sent (this process, or a Ray worker), loading its model through an
`EngineCache` that keeps the last model loaded for the next unit of the same model.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from skipcore.errors import SkipcoreWarning, UserError
from skipcore.evaluate.sweep.rows import setting_rows
from skipcore.evaluate.sweep.settings import Setting, SweepConfig
from skipcore.files import expand_home

if TYPE_CHECKING:
    from skipcore.decode.engine import SkipEngine
    from skipcore.models.reference import ModelRef

Say = Callable[[str], None]  # a one-line progress note (a progress bar's description)


@dataclass(frozen=True)
class WorkUnit:
    """Settings of one model that run together, in order, on one device."""

    model: str  # as the settings name it
    batch_size: int
    settings: tuple[Setting, ...]


def split_units(todo: list[Setting], cfg: SweepConfig) -> list[WorkUnit]:
    """`todo` (in run order) as units: one per (model, batch size) when timed, one per setting when not."""
    groups: dict[tuple[str, int], list[Setting]] = {}
    for s in todo:
        groups.setdefault((s.model, s.batch_size), []).append(s)
    if cfg.repeats == 0:
        return [WorkUnit(s.model, s.batch_size, (s,)) for s in todo]
    return [WorkUnit(m, b, tuple(group)) for (m, b), group in groups.items()]


def load_refs(cfg: SweepConfig) -> dict[str, ModelRef]:
    """Each model of the sweep resolved once (`skipcore.models.reference`), a local path made absolute first (a
    worker may start in another folder; on a cluster the path must exist on every node)."""
    from skipcore.models.reference import resolve_model

    out = {}
    for model, role in cfg.models:
        local = expand_home(model)
        try:
            out[model] = resolve_model(str(local.resolve()) if local.exists() else model)
        except UserError as e:  # a second model said as its setting: `baseline_model`, `reference_model`
            if role == "model":
                raise
            raise type(e)(str(e), field=f"{role}_model") from e
    return out


UnitRows = Callable[..., Iterator[tuple[Setting, dict, object]]]  # unit_rows's signature


@dataclass(frozen=True)
class SweepJob:
    """What every unit of one sweep shares, sent once to each process that runs units.

    `evaluate` is what runs a unit (`unit_rows`); it is a field so that it travels with the job to Ray workers
    (by reference for the library's own function), which lets a caller run its own (the tests inject faults).
    """

    cfg: SweepConfig
    examples: list
    refs: dict[str, ModelRef]  # model -> what it resolved to (`load_refs`), loaded from there
    evaluate: UnitRows


class EngineCache:
    """The engine of the last model loaded in this process, kept for the next unit of the same model (loaded
    the same way); loading another model drops it first, so one process holds one model at a time."""

    def __init__(self) -> None:
        self.key: tuple | None = None
        self.engine: SkipEngine | None = None

    def get(self, job: SweepJob, model: str, say: Say | None = None) -> SkipEngine:
        from skipcore.decode.engine import SkipEngine
        from skipcore.models.dtype_choice import Promise
        from skipcore.models.loading import load_model, model_dtype

        key, cfg = self._key(job, model), job.cfg
        if self.key != key:
            self.key, self.engine = None, None  # free the previous model before the next one loads
            name = model_name(job.refs[model])
            if say is not None:
                say(f"loading {name}")
            ref = job.refs[model]
            choice = model_dtype(ref, cfg.device, cfg.dtype, Promise.RECORDS, cfg.trust_remote_code)
            net, tokenizer = load_model(ref, cfg.device, choice.name, cfg.attn, cfg.trust_remote_code)
            engine = SkipEngine(
                net, tokenizer, model_name=name, attention_dtype=cfg.attention_dtype, dtype_choice=choice
            )
            self.key, self.engine = key, engine
        return self.engine

    def keep(self, job: SweepJob, model: str, engine: SkipEngine) -> None:
        """Use `engine` (loaded by the caller as `job` would load `model`) instead of loading it again."""
        self.key, self.engine = self._key(job, model), engine

    @staticmethod
    def _key(job: SweepJob, model: str) -> tuple:
        cfg = job.cfg
        return (job.refs[model], cfg.device, cfg.dtype, cfg.attn, cfg.attention_dtype, cfg.trust_remote_code)


def model_name(ref: ModelRef) -> str:
    """A folder's name, or a hub id or short name as it was given."""
    return ref.path.name if ref.kind in ("folder", "adapter") and ref.path is not None else ref.name


def for_model(examples: list, ref: ModelRef) -> tuple[list, str]:
    """`examples` in the prompt format the model `ref` resolves to was trained on, and the sentence saying where
    that is not their own (`skipcore.models.chat.in_trained_format`; only a folder or an adapter skipcore trained
    has one): each model of a sweep or a tune reads the rows as it learnt to."""
    from skipcore.models.chat import in_trained_format

    if ref.kind not in ("folder", "adapter") or ref.path is None:
        return list(examples), ""
    return in_trained_format(examples, ref.path)


def warn_formats(examples: list, refs: dict[str, ModelRef]) -> None:
    """Warn, once for each model before any work, where it reads the rows in another format than their own
    (`for_model`), and where it is an instruct model given them as raw text (`raw_text_note`)."""
    for ref in refs.values():
        for note in (for_model(examples, ref)[1], raw_text_note(ref)):
            if note:
                warnings.warn(note, SkipcoreWarning, stacklevel=3)


def raw_text_note(ref: ModelRef) -> str:
    """Where `ref` is an instruct model (its tokenizer has a chat template) that skipcore did not fine-tune, that a
    sweep or a tune gives it each row's prompt as raw text, which `generate` would wrap in the template (an
    instruct model often answers raw text poorly: its scores are those answers'); '' otherwise."""
    from skipcore.models.chat import declares_chat_template
    from skipcore.models.training_record import read_record

    own = ref.kind in ("folder", "adapter")  # a folder of its own (a real model's files are its cache's)
    folder = ref.path if own else ref.cache
    if folder is None or not folder.is_dir() or not declares_chat_template(folder):
        return ""
    if own and read_record(folder):  # skipcore fine-tuned it, on raw prompts
        return ""
    return (
        f"{model_name(ref)} is an instruct model (its tokenizer has a chat template): the rows' prompts reach it as "
        "raw text, as every model of a sweep or a tune reads them, where generate and the dashboard wrap each in "
        "the template; its scores are of answers to raw text"
    )


def _recorded_data(ref: ModelRef) -> dict:
    """The `data` section of the training record of the model `ref` resolves to ({} for a model skipcore did not
    train)."""
    from skipcore.models.training_record import read_record

    if ref.kind not in ("folder", "adapter") or ref.path is None:
        return {}
    return (read_record(ref.path) or {}).get("data") or {}


def _same_data_set(recorded: object, dataset: str | Path) -> bool:
    """Whether a record's data set (a shipped model's named from the repository's root, a user's by its absolute
    path) is `dataset`, by where each lies."""
    from skipcore.shipped import shipped_path

    if not isinstance(recorded, str) or not recorded:
        return False
    place = os.path.realpath(expand_home(recorded if os.path.isabs(recorded) else shipped_path(recorded)))
    return place == os.path.realpath(expand_home(str(dataset)))


def trained_on(ref: ModelRef, dataset: str | Path, split: str | None) -> bool:
    """Whether the model `ref` resolves to was trained on `dataset`'s `split`, as its training record says (the
    data set by where it is, a single file's split None whatever was asked: it has one)."""
    data = _recorded_data(ref)
    if (None if _single(dataset) else split) != data.get("split"):
        return False
    return _same_data_set(data.get("dataset"), dataset)


def dev_shared(ref: ModelRef, dataset: str | Path, split: str | None) -> tuple[int, int] | None:
    """(shared, sources) where `dataset`'s `split` is the dev split the model's training scored and its record says
    `shared` of those `sources` (the first ones) are also training sources; None otherwise. Read from the record
    alone: the training rows are not read again."""
    data = _recorded_data(ref)
    dev = data.get("dev") or {}
    shared, sources = dev.get("shared_with_training"), dev.get("sources")
    if _single(dataset) or split != dev.get("split") or not isinstance(shared, int) or shared < 1:
        return None
    return (shared, sources) if _same_data_set(data.get("dataset"), dataset) else None


def warn_training_rows(refs: dict[str, ModelRef], dataset: str | Path, split: str | None, use: str) -> None:
    """Warn, before any work, where a model is scored on the rows it was trained on (`trained_on`), or on a dev split
    its training found sharing sources with its training rows (`dev_shared`): their scores overstate what it
    writes for rows it never saw, and nothing else would say so. `use`: what is done on them ('scored',
    'searched', 'evaluated')."""
    where = f"{dataset}" + (f" [{split}]" if split and not _single(dataset) else "")
    for ref in refs.values():
        if trained_on(ref, dataset, split):
            said = (
                f"{model_name(ref)} was trained on {where}: {use} there, its quality is read on its own training "
                "rows (less any dev fraction held out) and overstates what it writes for new ones; use a split it "
                "was not trained on"
            )
        elif shared := dev_shared(ref, dataset, split):
            said = (
                f"{model_name(ref)}'s training found {shared[0]} of the first {shared[1]} sources of {where} among "
                f"its training sources: {use} there, its quality is partly read on rows it was trained on and "
                "overstates what it writes for new ones"
            )
        else:
            continue
        warnings.warn(said, SkipcoreWarning, stacklevel=3)


def _single(dataset: str | Path) -> bool:
    from skipcore.data import is_single_file

    return is_single_file(str(dataset))


def unit_rows(
    job: SweepJob, unit: WorkUnit, engines: EngineCache, say: Say | None = None
) -> Iterator[tuple[Setting, dict, object]]:
    """The unit's (setting, row, generation result), one at a time as each finishes."""
    engine = engines.get(job, unit.model, say)
    started = None if say is None else (lambda s: say(s.label()))
    examples, _ = for_model(job.examples, job.refs[unit.model])
    yield from setting_rows(engine, examples, list(unit.settings), job.cfg, on_start=started)
