"""The examples a run trains on, and the dev examples its dev loss is scored on, which are never training
data: another split of a data folder, or a share of the sources held out (whole sources, drawn with the seed).
A refusal names the settings it is about by their own names (`UserError.field`); a front end says them in its words,
which never reach into the data set's path (`UserError.said_as`)."""

from __future__ import annotations

import sys
from collections.abc import Collection
from dataclasses import replace

from skipcore.errors import UserError, quoted, spoken
from skipcore.training.settings import TrainSettings, as_recorded

TRAIN_SPLIT, DEV_SPLIT = "train", "dev"  # the splits of a data folder read when none is named


def check_data_settings(s: TrainSettings) -> str | None:
    """The training split (None for a single file), after refusing settings that would score the model on its
    own training data or that a single file cannot honour, and a split given as a path (`./dev` would read the
    training split's folder's dev data past the check that the dev split is not the training one, and `../x/train`
    a file outside the data folder); before any work."""
    from skipcore.data import is_single_file

    if s.dev_fraction is not None:
        if not 0.0 < s.dev_fraction < 1.0:
            raise UserError(
                f"dev_fraction must be between 0 and 1 (exclusive), got {s.dev_fraction}",
                field="dev_fraction",
            )
        if s.eval_split is not None:
            raise UserError(
                "give one of dev_fraction (dev sources held out of the training data) and eval_split (a dev "
                "split of its own)",
                field=("dev_fraction", "eval_split"),
            )
    if s.eval_limit is not None and s.eval_limit < 1:
        raise UserError(f"eval_limit must be >= 1, got {s.eval_limit}", field="eval_limit")
    if is_single_file(s.dataset):
        for name, value in (("split", s.split), ("eval_split", s.eval_split)):
            if value is not None:
                raise UserError(
                    f"{name} {value} does not apply to {s.dataset}: a single file has no splits (it is all "
                    "training data); hold out dev data with dev_fraction F",
                    field=(name, "dev_fraction"),
                )
        if s.eval_every and s.dev_fraction is None:
            # a resumed run keeps the data it trains on: one that held nothing out cannot begin to
            how = (
                "the run held none of it out and a resumed run keeps its data: start a new run with dev_fraction F "
                "(e.g. 0.1) for a dev loss"
                if s.resume
                else "hold out a share of it with dev_fraction F (e.g. 0.1)"
            )
            raise UserError(
                f"eval_every needs dev data the model does not train on, and {s.dataset} is a single file: {how}",
                field=("eval_every", "dev_fraction"),
            )
        return None
    for name, value in (("split", s.split), ("eval_split", s.eval_split)):
        if value is not None and (any(sep in value for sep in "/\\") or value in (".", "..")):
            raise UserError(
                f"{name} {quoted(value)} is a path: give the name of one of the data folder's files, without "
                "its folder or suffix (train, dev, test); another folder is another dataset",
                field=name,
            )
    split = s.split or TRAIN_SPLIT
    if s.eval_split is not None and not s.eval_every:
        raise UserError(
            f"eval_split {s.eval_split} is the split the dev loss is measured on, and without eval_every N no "
            "dev loss is measured: add eval_every N, or leave out eval_split",
            field=("eval_split", "eval_every"),
        )
    if s.dev_fraction is None and s.eval_every and (s.eval_split or DEV_SPLIT) == split:
        raise UserError(
            f"eval_split {split} is the training split: the dev loss would be measured on training data; "
            "choose another split, or hold out dev data with dev_fraction F",
            field=("eval_split", "dev_fraction"),
        )
    return split


def training_data(
    s: TrainSettings, split: str | None, given: Collection[str] = (), say: bool = True
) -> tuple[list, list | None, dict]:
    """(training examples, dev examples or None, the record of what was really used for each). `given`: the
    settings the user set (a cap on dev sources they set and the data cannot fill is said); `say`: print
    warnings (the main process)."""
    from skipcore.data import hold_out, load_examples, rows_digest

    examples = load_examples(s.dataset, split=split, task=s.task, limit=s.limit)
    where = f"{s.dataset}" + (f" [{split}]" if split else "")
    if not examples:
        raise UserError(f"no training examples in {where}")
    record: dict = {"dataset": as_recorded(s.dataset, "dataset"), "split": split, "task": examples[0].task}
    record["rows_sha256"] = rows_digest(examples)  # the rows read, by content: a resume over others is said
    dev = None
    short = say and "eval_limit" in given  # a capped dev set smaller than the cap the user set is said
    if s.dev_fraction is not None:
        sources = len(examples)
        examples, dev = hold_out(examples, s.dev_fraction, s.seed)
        if say and s.dev_fraction * sources < 0.5:  # rounded up: the fraction asked for holds out no source
            print(
                f"note: {spoken('dev_fraction')} {s.dev_fraction:g} of {sources} sources is less than one: "
                f"one source is held out (whole sources, at least one), {len(examples)} train",
                file=sys.stderr,
            )
        record["dev"] = {
            "held_out_of": where,
            "fraction": s.dev_fraction,
            "seed": s.seed,
            "sources": len(dev),
            "note": "whole sources held out: skipcore.data.hold_out(examples, fraction, seed) gives the "
            "split",
        }
        if len(dev) < s.eval_limit and short:
            print(
                f"warning: {spoken('eval_limit')} {s.eval_limit}: {spoken('dev_fraction')} {s.dev_fraction} holds "
                "out only "
                f"{len(dev)} sources; all {len(dev)} are scored",
                file=sys.stderr,
            )
        dev = dev[: s.eval_limit]
    elif s.eval_every:
        eval_split = s.eval_split or DEV_SPLIT
        dev = load_examples(
            s.dataset, split=eval_split, task=s.task, limit=s.eval_limit, split_setting="eval_split"
        )
        if not dev:  # every eval_every steps would measure nothing, said nowhere
            raise UserError(
                f"{s.dataset} [{eval_split}] holds no rows: eval_every {s.eval_every} would measure no dev loss; "
                "give a split with rows (eval_split), hold some out (dev_fraction F), or leave out eval_every",
                field=("eval_split", "eval_every"),
            )
        if len(dev) < s.eval_limit and short:
            print(
                f"warning: {spoken('eval_limit')} {s.eval_limit}: {s.dataset} [{eval_split}] has only {len(dev)} "
                f"sources; all {len(dev)} are scored",
                file=sys.stderr,
            )
        # the dev loss is measured on the prompts training reads: a dev file of another type than the training
        # file (train.csv beside dev.jsonl) would otherwise be read in its own format
        dev = [replace(e, task=record["task"]) for e in dev]
        shared = {e.source for e in examples} & {e.source for e in dev}
        if shared and say:
            print(
                f"warning: {len(shared)} of {len(dev)} dev sources in {s.dataset} [{eval_split}] are also "
                f"training sources: the dev loss is partly measured on training data",
                file=sys.stderr,
            )
        record["dev"] = {"split": eval_split, "sources": len(dev), "shared_with_training": len(shared)}
    record["sources"] = len(examples)
    if dev is not None:
        record["dev"]["scored"] = len(dev)
    return examples, dev, record
