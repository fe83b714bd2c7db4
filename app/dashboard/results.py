"""Each page's last result, kept for the session and, for the long ones, in the run history: one typed record per
page, with the settings that made it (`provenance`) where a page shows them, and one cache of the files the pages'
download buttons offer.

A page keeps its result when a run ends and shows the last one kept, so moving to another page and back keeps it.
A result of a kind the run history keeps (`PageResult.page_file` set: Generate, the small sweep, Compare, the
lens, and any page that adds one) is also written there when it is made (`kept()`), with the page's own settings
as the session held them (`page_inputs`), so it survives a reload: `shown(now)` gives the page's last result, or
after a reload the newest kept run made with the settings the page shows now; and Run history reopens any kept run
(`reopen`): its result back on its page and the page's settings restored (`restore_inputs`), so the page shows
the settings that made it, not its defaults under a warning.

A new kind of kept run is one more subclass here: `page` (its kind and session slot), `page_file` (the page that
shows it), `prefix` (the address keys of its page's settings), a `run_id` field, `record()` (the run as a
`RunRecord`: its tables and JSON) and `from_run()` (the result again from a kept `Run`). Nothing else in the
session holds a result.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Self

import pandas as pd
import streamlit as st

from app.dashboard import address
from app.dashboard.markdown import plain
from app.dashboard.models import DTYPE_KEY, LOCAL_KEY, MODEL_KEY
from app.dashboard.provenance import Settings, differences
from app.dashboard.runstore import TRACE, Run, RunRecord, RunStore
from skipcore.errors import UserError, first_line, quoted

if TYPE_CHECKING:
    from skipcore.decode.outputs import GenerationResult
    from skipcore.lens import Agreement, LensResult

SLOTS = "page_results"  # in the session: page -> its last result
DOWNLOADS = (
    "page_downloads"  # in the session: (button group, run id, format) -> (bytes, file name, MIME type)
)
# settings of every page that reopening a run sets or resets, besides the page's own (its `prefix`): the model
# (its sidebar widgets: which, a typed folder, its precision), and which model the design was made for
# (`state.params` keeps the design for it)
SHARED_INPUTS = (MODEL_KEY, LOCAL_KEY, DTYPE_KEY)
DESIGN_FOR = "_design_for"
# in the session: {page: (run id, when made)} of the kept run `shown` found for the page
FOUND = "_found_runs"
# in a kept run's settings: those its page's address did not name (a widget at its default; prompts at theirs, or
# too long for an address). A jump there leaves them out of the address it opens: Streamlit takes each one named
# at its default out again as a change of its own, a history entry each
AT_DEFAULT = "_at_default"
RESTORED = "_restored_inputs"  # in the session: (page, settings) a reopened run set, until that page has run
NOT_RESTORED = "_inputs_not_restored"  # in the session: why they were dropped, said once on the page

Download = tuple[bytes, str, str]  # what a download button offers: the file's bytes, its name, its MIME type
KINDS: dict[str, type[PageResult]] = {}  # a kept run's kind -> the result that reopens it


class PageResult:
    """What every page's result does: it is kept in its page's slot, and read back from there; a kind the run
    history keeps is also written there, and reopened from there."""

    page: ClassVar[str]  # its slot in the session, and its kind in the run history
    page_file: ClassVar[str | None] = None  # the page that shows it, for a kind the run history keeps
    prefix: ClassVar[str] = ""  # the address keys of that page's own settings
    title: ClassVar[str] = ""  # the kind, as the run history lists it
    page_title: ClassVar[str] = ""  # the page that shows it, as the sidebar names it

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("page_file"):
            KINDS[cls.page] = cls

    def keep(self) -> None:
        """This becomes its page's last result (the one before it is dropped)."""
        st.session_state.setdefault(SLOTS, {})[self.page] = self

    @classmethod
    def last(cls, session: Any = None) -> Self | None:
        """The page's last result, None before its first run. `session`: another session's state (a test's),
        this session's by default."""
        session = st.session_state if session is None else session
        slots = session.get(SLOTS, {})
        return slots.get(cls.page)

    # -- the run history -------------------------------------------------------------------------------------
    def record(self) -> RunRecord:
        """The result as the run history keeps it."""
        raise NotImplementedError

    @classmethod
    def from_run(cls, run: Run, store: RunStore) -> Self:
        """The result again from a kept run; a UserError saying why where its record cannot show as one."""
        raise NotImplementedError

    @classmethod
    def trace_parts(cls, run: Run) -> list[str]:
        """The parts of a kept run that are per-token traces of a decode worth drawing beside other runs'."""
        return [TRACE] if TRACE in run.parts else []

    def kept_words(self) -> str | None:
        """Where the run history keeps this result, in a line: as the run this page made (or one reopened from
        there), or, where the page found it there itself (`shown`: a new session, another tab's run of the same
        settings, a run of this page just stopped), as a run of the history, with when it was made. None where it
        is not kept."""
        run_id = getattr(self, "run_id", None)
        if run_id is None:
            return None
        found = st.session_state.get(FOUND, {}).get(self.page)
        if found is not None and found[0] == run_id:
            return f"From the run history: run #{run_id}, made {found[1]} UTC with these settings."
        return f"Kept as run #{run_id} in the run history."

    def kept(self) -> Self:
        """Keep this result in the run history, with the page's settings as the session holds them now, and as
        its page's last result (with its run's number); a warning on the page where it cannot be kept."""
        run_id = None
        try:
            run_id = RunStore().add(dataclasses.replace(self.record(), inputs=page_inputs()))
        except UserError as e:
            st.warning(f"This result was not kept in the run history: {e}")
        result = dataclasses.replace(self, run_id=run_id)  # type: ignore[type-var]
        result.keep()
        return result

    @classmethod
    def shown(cls, now: Settings | None) -> Self | None:
        """The page's last result; in a new session (after a reload), the newest kept run of this kind made with
        the settings the page shows now (`now`) that can be reopened, which becomes the page's result. A newer one
        that cannot be (a file of it damaged) is said, where the page showed only what to press."""
        last = cls.last()
        if last is not None or now is None:
            return last
        damaged: list[str] = []
        try:
            store = RunStore()
            runs = [run for run in store.runs(cls.page) if not differences(run.settings, now)]
        except UserError:  # an unreadable history shows nothing here; the Run history page says why
            return None
        for run in runs:
            try:
                if run.problem is not None:
                    raise UserError(run.problem)
                result = cls.from_run(run, store)
            except UserError as e:
                damaged.append(f"run #{run.id}: {e}")
                continue
            result.keep()
            st.session_state.setdefault(FOUND, {})[cls.page] = (run.id, run.made_utc)
            if damaged:
                st.caption(plain(f"A newer kept run of these settings cannot be reopened ({damaged[0]})."))
            return result
        if damaged:
            st.warning(
                plain(f"The kept run of these settings cannot be reopened ({damaged[0]}); run it again.")
            )
        return None


def _json_value(value: object) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return True


def _address_widgets() -> dict[str, bool]:
    """The keys of the widgets drawn this run that are bound to the address (every page setting is one,
    `address.KEEP`, and no button, upload or table selection is) or whose text it keeps while short (the prompts:
    `address.keep_text`), each with whether it is left out of the address (a bound widget at its default, a text
    not kept there)."""
    ss = st.session_state
    widgets = {}
    for key, meta, _ in address.drawn_widgets():
        if getattr(meta, "bind", None) == "query-params":
            widgets[key] = _at_default(meta, ss.get(key))
        elif address.kept_text(key):
            widgets[key] = not address.in_address(key)
    return widgets


def _at_default(meta: Any, value: Any) -> bool:
    """Whether a bound widget's `value` is its default, which Streamlit leaves out of the address (its own test:
    the widget's value read from nothing)."""
    try:
        return bool(meta.deserializer(None) == value)
    except Exception:  # a widget whose default cannot be read so: named in the address, as before
        return False


def page_inputs() -> dict[str, Any]:
    """The settings the page shows, as the session holds them: its widgets kept in the address (the model's
    among them), the designed schedule, and the model the design was made for, and under `AT_DEFAULT` those of
    them the address leaves out. Reopening the run sets exactly these (`restore_inputs`)."""
    from app.dashboard.state import PARAMS

    ss = st.session_state
    widgets = _address_widgets()
    keys = [*sorted(widgets), *PARAMS, DESIGN_FOR]
    inputs = {k: ss[k] for k in keys if k in ss and ss[k] is not None and _json_value(ss[k])}
    at_default = [k for k in inputs if widgets.get(k)]
    return {**inputs, AT_DEFAULT: at_default} if at_default else inputs


def restore_inputs(inputs: dict[str, Any], prefix: str, page: str) -> None:
    """Set a page's settings as a kept run had them: the page's own (keys starting with `prefix`), the model and
    the design go back to their defaults, then take the run's values. Call it before the page's widgets are drawn
    (a button's callback): a widget's value can be set only before the widget is. `page` (its file) runs them
    first: where they break it, `run_page` drops them."""
    from app.dashboard.state import PARAMS

    ss = st.session_state
    for key in [k for k in ss if k.startswith(prefix) or k in PARAMS or k in SHARED_INPUTS]:
        del ss[key]
    settings = {k: v for k, v in inputs.items() if k != AT_DEFAULT}
    ss.update(settings)
    ss[RESTORED] = (page, list(settings))


def run_page(page: Any) -> None:
    """`page.run()`. Where the settings a reopened run just set break its page (a value its widget no longer
    takes, or a history edited by hand), they are dropped and the page runs again on its defaults, saying so: one
    line, not a traceback on every visit until a reload."""
    ss = st.session_state
    if why := ss.pop(NOT_RESTORED, None):
        st.warning(why)
    target, restored = ss.get(RESTORED) or (None, [])
    if target is None or Path(target).stem != page.url_path:  # not yet on its page (the history's own run)
        page.run()
        return
    del ss[RESTORED]  # the page's first run with them: whatever it does next is the user's
    try:
        page.run()
    except Exception as e:  # Streamlit's reruns and stops are not Exceptions: they pass
        for key in restored:
            ss.pop(key, None)
        ss[NOT_RESTORED] = (
            f"The page failed with the reopened run's settings ({first_line(e)}): they were dropped, and the page "
            "shows its own defaults."
        )
        st.rerun()


def reopen(run: Run, store: RunStore) -> PageResult:
    """A kept run back as its page's result, with the page's settings as they were when it was made; returns the
    result (its page is `type(result).page_file`). A UserError saying why where it cannot be reopened."""
    if run.problem is not None:
        raise UserError(run.problem)
    kind = KINDS.get(run.page)
    if kind is None:
        raise UserError(f"runs of kind {run.page!r} cannot be reopened by this version of the dashboard")
    result = kind.from_run(run, store)
    if run.inputs:  # a run kept before pages kept their settings leaves the page's as they are
        restore_inputs(run.inputs, kind.prefix, kind.page_file)
    result.keep()
    st.session_state.get(FOUND, {}).pop(kind.page, None)  # chosen, not found
    return result


def _layers(metadata: dict) -> int:
    return int(metadata.get("num_layers") or 1)


# -- the pages' results --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class GenerateResult(PageResult):
    """The Generate page: the outputs of a batch of prompts and its trace."""

    page: ClassVar[str] = "generate"
    page_file: ClassVar[str] = "sections/generate.py"
    prefix: ClassVar[str] = "gen_"
    title: ClassVar[str] = "generate"
    page_title: ClassVar[str] = "Generate"

    prompts: list[str]
    texts: list[str]
    trace: pd.DataFrame
    metadata: dict
    settings: Settings
    run_id: int | None = None  # its number in the run history, once kept there

    def record(self) -> RunRecord:
        from skipcore import summarize

        L = _layers(self.metadata)
        return RunRecord(
            self.page,
            self.settings["schedule"][0],
            self.settings,
            L,
            {TRACE: (self.trace, self.metadata)},
            summarize(self.trace, L),
            self.prompts,
            self.texts,
        )

    @classmethod
    def from_run(cls, run: Run, store: RunStore) -> GenerateResult:
        """The page reads the schedule that made it, and one output per prompt."""
        from skipcore.schedule import Schedule

        if "schedule" not in run.settings:
            raise UserError("its settings do not name the schedule that made it")
        Schedule.from_record(run.settings["schedule"][1])  # a ScheduleError says what is wrong with it
        if len(run.prompts) != len(run.texts):
            raise UserError(f"it holds {len(run.prompts)} prompts but {len(run.texts)} outputs")
        trace, metadata = store.trace(run.id)
        return cls(run.prompts, run.texts, trace, metadata, run.settings, run.id)


@dataclass(frozen=True)
class CompareResult(PageResult):
    """The Compare page: each policy's generation of the same prompts, and its scores where references exist."""

    page: ClassVar[str] = "compare"
    page_file: ClassVar[str] = "sections/compare.py"
    prefix: ClassVar[str] = "cmp_"
    title: ClassVar[str] = "comparison"
    page_title: ClassVar[str] = "Compare policies"

    prompts: list[str]
    results: dict[str, GenerationResult]  # policy -> what it generated (those that ran)
    errors: dict[str, str]  # policy -> why it did not run
    quality: dict[str, dict] | None  # policy -> BLEU, ROUGE, chrF; None without references
    sampled: bool
    settings: Settings
    run_id: int | None = None

    def record(self) -> RunRecord:
        if not self.results:
            raise UserError("no policy ran")
        first = next(iter(self.results.values()))
        data = {
            "policies": list(self.results),
            "texts": {name: r.texts for name, r in self.results.items()},
            "token_ids": {name: r.token_ids for name, r in self.results.items()},
            "errors": self.errors,
            "quality": self.quality,
            "sampled": self.sampled,
        }
        tables = {self.trace_part(name): (r.trace, r.metadata) for name, r in self.results.items()}
        label = self.settings["policies"][0] if "policies" in self.settings else ", ".join(self.results)
        summary = {"policies": len(self.results)}
        L = _layers(first.metadata)
        return RunRecord(self.page, label, self.settings, L, tables, summary, self.prompts, [], data=data)

    @staticmethod
    def trace_part(policy: str) -> str:
        """The part a policy's trace is kept as."""
        return f"trace of {policy}"

    @classmethod
    def trace_parts(cls, run: Run) -> list[str]:
        """Every policy's trace (full depth's among them where it ran)."""
        return [part for part in run.parts if part.startswith(cls.trace_part(""))]

    @classmethod
    def from_run(cls, run: Run, store: RunStore) -> CompareResult:
        from skipcore import summarize
        from skipcore.decode.outputs import GenerationResult

        d = run.data
        try:
            results = {}
            for name in d["policies"]:
                texts = d["texts"][name]
                if not isinstance(texts, list) or len(texts) != len(run.prompts):
                    raise UserError(f"it holds {len(run.prompts)} prompts but not as many outputs of {name}")
                trace, metadata = store.table(run.id, cls.trace_part(name))
                summary = summarize(trace, _layers(metadata))
                results[name] = GenerationResult(texts, d["token_ids"][name], trace, summary, metadata)
            errors, quality, sampled = d["errors"], d["quality"], d["sampled"]
        except (KeyError, TypeError) as e:
            raise UserError(f"its record lacks {e}") from e
        if not (isinstance(errors, dict) and isinstance(quality, dict | None) and isinstance(sampled, bool)):
            raise UserError("its record's errors, quality or sampled are not what a comparison keeps")
        if quality is not None and not all(isinstance(q, dict) for q in quality.values()):
            raise UserError("its record's quality scores are not one table a policy")
        return cls(run.prompts, results, errors, quality, sampled, run.settings, run.id)


@dataclass(frozen=True)
class LensComparison(PageResult):
    """The Layer lens page: full depth's read-outs and the schedule's path, and how often they agree."""

    page: ClassVar[str] = "lens"
    page_file: ClassVar[str] = "sections/lens.py"
    prefix: ClassVar[str] = "lens_"
    title: ClassVar[str] = "lens"
    page_title: ClassVar[str] = "Layer lens"

    prompts: list[str]
    label: str  # the schedule, in words
    tokens: str  # what the schedule's path reads (full depth's output, or its own decode)
    full: LensResult
    path: LensResult
    agreement: Agreement
    settings: Settings
    run_id: int | None = None

    def record(self) -> RunRecord:
        a = self.agreement
        tables = {}
        for side, res in (("full", self.full), ("path", self.path)):
            tables[f"{side} lens"] = (res.table, res.metadata)
            tables[f"{side} trace"] = (res.trace, res.metadata)
        tables["agreement by step"] = (a.by_step, {})
        tables["agreement by budget"] = (a.by_budget, {})
        data = {
            "label": self.label,
            "tokens": self.tokens,
            **{f"{side} texts": r.texts for side, r in (("full", self.full), ("path", self.path))},
            **{f"{side} token_ids": r.token_ids for side, r in (("full", self.full), ("path", self.path))},
            "agreement": {"overall": a.overall, "tokens": a.tokens},
        }
        summary = {"agreement": a.overall, "layer_speedup": self.path.summary.get("layer_speedup")}
        L = _layers(self.full.metadata)
        return RunRecord(
            self.page, self.label, self.settings, L, tables, summary, self.prompts, self.full.texts, data=data
        )

    @classmethod
    def trace_parts(cls, run: Run) -> list[str]:
        """The schedule's path (full depth's is the reference every comparison has)."""
        return [part for part in ("path trace",) if part in run.parts]

    @classmethod
    def from_run(cls, run: Run, store: RunStore) -> LensComparison:
        from skipcore.lens import Agreement, LensResult

        d = run.data
        try:
            sides = {}
            for side in ("full", "path"):
                table, metadata = store.table(run.id, f"{side} lens")
                trace, _ = store.table(run.id, f"{side} trace")
                sides[side] = LensResult(table, trace, d[f"{side} texts"], d[f"{side} token_ids"], metadata)
            by_step, _ = store.table(run.id, "agreement by step")
            by_budget, _ = store.table(run.id, "agreement by budget")
            a = d["agreement"]
            agreement = Agreement(float(a["overall"]), int(a["tokens"]), by_step, by_budget)
            return cls(
                run.prompts,
                d["label"],
                d["tokens"],
                sides["full"],
                sides["path"],
                agreement,
                run.settings,
                run.id,
            )
        except (KeyError, TypeError, ValueError) as e:
            raise UserError(f"its record lacks {e}") from e


@dataclass(frozen=True)
class SweepResult(PageResult):
    """The Trade-offs page's small sweep: its table of rows."""

    page: ClassVar[str] = "tradeoffs"
    page_file: ClassVar[str] = "sections/tradeoffs.py"
    prefix: ClassVar[str] = "to_"
    title: ClassVar[str] = "sweep"
    page_title: ClassVar[str] = "Trade-offs"

    table: pd.DataFrame
    settings: Settings
    run_id: int | None = None

    def record(self) -> RunRecord:
        L = int(self.table["num_layers"].max()) if "num_layers" in self.table else 1
        label = self.settings["sweep"][0] if "sweep" in self.settings else f"{len(self.table)} settings"
        summary = {"settings": len(self.table)}
        return RunRecord(self.page, label, self.settings, L, {"sweep": (self.table, {})}, summary)

    @classmethod
    def from_run(cls, run: Run, store: RunStore) -> SweepResult:
        table, _ = store.table(run.id, "sweep")
        return cls(table, run.settings, run.id)


@dataclass(frozen=True)
class TuneRunResult(PageResult):
    """The Tune page's search (`skipcore.evaluate.tune`): its trials table, the floor, the chosen setting and its
    schedule (as `best_schedule.json` holds it) and the report."""

    page: ClassVar[str] = "tune"
    page_file: ClassVar[str] = "sections/tune.py"
    prefix: ClassVar[str] = "tune_"
    title: ClassVar[str] = "tune"
    page_title: ClassVar[str] = "Tune"

    trials: pd.DataFrame
    found: dict  # floor, metric, speedup column, chosen (a setting id or None), schedule (a dict or None), report
    settings: Settings
    run_id: int | None = None

    def record(self) -> RunRecord:
        L = int(self.trials["num_layers"].max()) if "num_layers" in self.trials else 1
        chosen = self.trials[self.trials["setting_id"] == self.found.get("chosen")]
        label = chosen["tune_label"].iloc[0] if len(chosen) else "no setting met the floor"
        summary = {"trials": int((self.trials["tune_trial"] >= 0).sum())}
        if len(chosen):
            summary.update(chosen[["layer_speedup", "flops_speedup_decode"]].iloc[0].to_dict())
        tables = {"trials": (self.trials, {})}
        return RunRecord(self.page, label, self.settings, L, tables, summary, data=dict(self.found))

    @classmethod
    def from_run(cls, run: Run, store: RunStore) -> TuneRunResult:
        floor = run.data.get("floor")
        if not isinstance(floor, int | float) or isinstance(floor, bool):
            raise UserError(f"its record's floor is not a number ({quoted(floor)})")
        if run.data.get("schedule") is not None:
            from skipcore.schedule import Schedule

            Schedule.from_record(run.data["schedule"])  # a ScheduleError says what is wrong with it
        trials, _ = store.table(run.id, "trials")
        return cls(trials, run.data, run.settings, run.id)


@dataclass(frozen=True)
class FitResult(PageResult):
    """The designer's fit to a target speedup (its schedule goes into the design's own widgets): what it gave,
    or why no schedule fits."""

    page: ClassVar[str] = "designer"

    note: str | None = None  # what the fit gave, against the target
    why: str | None = None  # why it starts below full depth, where it does
    error: str | None = None  # why no schedule fits


def download(group: str, run_id: str, fmt: str, make: Callable[[], Download]) -> Download:
    """The file a download button offers, made once per run and format. A group (one page's row of buttons)
    keeps one run's files: a new run's drop the last run's."""
    cache = st.session_state.setdefault(DOWNLOADS, {})
    for stale in [k for k in cache if k[0] == group and k[1] != run_id]:
        del cache[stale]
    if (group, run_id, fmt) not in cache:
        cache[(group, run_id, fmt)] = make()
    return cache[(group, run_id, fmt)]
