"""A model skipcore fine-tuned reads a data set's rows in the prompt format it was trained on, whatever the data's
own (a JSON-lines copy of E2E rows reads as 'Input: ...\\nOutput:', an E2E CSV as 'MR: ...\\nText:'): generate,
sweep, tune and training's dev loss, each warned once where that changes a prompt; any other model reads the data's
own format."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from skipcore.commands import main
from skipcore.data import Example, format_prompt, load_examples
from skipcore.errors import SkipcoreWarning
from skipcore.models.chat import in_trained_format, trained_task
from tests.helpers import SOURCES, as_trained_model, sweep_config

WARNED = "was trained on e2e prompts"


@pytest.fixture
def e2e_trained(model_dirs, tmp_path) -> Path:
    """The tiny OPT model, its training record saying it learnt E2E prompts (as `train` on an E2E CSV writes)."""
    folder = as_trained_model(model_dirs["opt"], tmp_path / "e2e-trained", 8, 4, 6)
    record = json.loads((folder / "skipcore_training.json").read_text())
    record["data"]["task"] = "e2e"
    (folder / "skipcore_training.json").write_text(json.dumps(record))
    return folder


@pytest.fixture
def given_prompts(monkeypatch) -> list[str]:
    """Every prompt an engine is asked to generate from, as it was given."""
    from skipcore.decode.engine import SkipEngine

    given: list[str] = []
    real = SkipEngine.generate

    def recording(self, prompts, *args, **kw):
        given.extend(prompts)
        return real(self, prompts, *args, **kw)

    monkeypatch.setattr(SkipEngine, "generate", recording)
    return given


def e2e_prompts() -> list[str]:
    return [format_prompt("e2e", source) for source, _ in SOURCES]


def test_the_trained_task_replaces_the_datas_own_and_says_so(e2e_trained, model_dirs):
    rows = [Example(source, tuple(refs), "generic") for source, refs in SOURCES]
    assert trained_task(e2e_trained) == "e2e"
    given, note = in_trained_format(rows, e2e_trained)
    assert [e.task for e in given] == ["e2e"] * 3 and [e.source for e in given] == [e.source for e in rows]
    assert note.startswith(f"e2e-trained {WARNED} ('MR: ...\\nText:')"), note
    assert "read as generic ('Input: ...\\nOutput:'), are given to it as e2e prompts" in note, note
    assert in_trained_format(given, e2e_trained) == (given, "")  # rows already in its format: nothing to say
    # a model skipcore did not train, or whose record names no task, reads the data's own format
    untrained = model_dirs["opt"]
    assert trained_task(untrained) is None and in_trained_format(rows, untrained) == (rows, "")
    record = json.loads((e2e_trained / "skipcore_training.json").read_text())
    del record["data"]["task"]
    (e2e_trained / "skipcore_training.json").write_text(json.dumps(record))
    assert in_trained_format(rows, e2e_trained) == (rows, "")


def test_generate_gives_a_data_sets_rows_in_the_trained_format(
    e2e_trained, model_dirs, sweep_dataset, capsys, given_prompts
):
    flags = ["--max-new-tokens", "3", "--dtype", "float32"]
    capsys.readouterr()
    with pytest.warns(SkipcoreWarning, match=WARNED) as said:
        assert main(["generate", "--model", str(e2e_trained), "--dataset", str(sweep_dataset), *flags]) == 0
    assert len([w for w in said if WARNED in str(w.message)]) == 1
    out = capsys.readouterr().out
    assert given_prompts == e2e_prompts(), given_prompts
    given_prompts.clear()
    typed = [a for p in e2e_prompts() for a in ("--prompt", p)]
    assert main(["generate", "--model", str(e2e_trained), *typed, *flags]) == 0
    assert capsys.readouterr().out == out  # the outputs of the same prompts typed
    given_prompts.clear()
    assert main(["generate", "--model", str(model_dirs["opt"]), "--dataset", str(sweep_dataset), *flags]) == 0
    assert given_prompts == [format_prompt("generic", s) for s, _ in SOURCES]  # no record: the data's own


def test_a_sweep_and_a_tune_give_each_model_the_rows_in_its_format(
    e2e_trained, model_dirs, sweep_dataset, tmp_path, given_prompts
):
    from skipcore.evaluate.sweep.runner import run_sweep
    from skipcore.evaluate.tune import TuneSettings, run_tune

    cfg = sweep_config(
        model_dirs, sweep_dataset, tmp_path / "s.parquet", model=str(e2e_trained),
        baseline_model=str(model_dirs["opt"]), split=None, targets=(1.0,), modes=("skip",), batch_sizes=(1,),
        policies=("static",), max_new_tokens=3, repeats=0,
    )  # fmt: skip
    with pytest.warns(SkipcoreWarning, match=WARNED):
        df = run_sweep(cfg)
    # the trained model's rows read E2E prompts, and are scored as E2E (slot accuracy); the baseline's its own
    assert set(given_prompts) == set(e2e_prompts()) | {format_prompt("generic", s) for s, _ in SOURCES}
    trained_rows = df[df["model_role"] == "model"]
    assert len(trained_rows) and trained_rows["slot_name"].notna().all()
    given_prompts.clear()
    tune = TuneSettings(
        model=str(e2e_trained), dataset=str(sweep_dataset), out=tmp_path / "tune", limit=3, batch_size=1,
        prune_after=0, max_new_tokens=3, trials=1, device="cpu", dtype="float32", progress=False, max_drop=100.0,
    )  # fmt: skip
    with pytest.warns(SkipcoreWarning, match=WARNED):
        run_tune(tune)
    assert given_prompts and set(given_prompts) == set(e2e_prompts()), given_prompts


def test_the_dev_loss_reads_a_dev_file_of_another_type_in_the_training_format(tmp_path):
    from skipcore.training.examples import training_data
    from skipcore.training.settings import TrainSettings

    data = tmp_path / "data"
    data.mkdir()
    csv_rows = [{"mr": s, "ref": r} for s, refs in SOURCES for r in refs]
    pd.DataFrame(csv_rows).to_csv(data / "train.csv", index=False)
    jsonl_rows = [json.dumps({"source": s, "target": refs[0]}) for s, refs in SOURCES]
    (data / "dev.jsonl").write_text("\n".join(jsonl_rows) + "\n")
    assert {e.task for e in load_examples(data, split="dev")} == {"generic"}
    s = TrainSettings(model="/nowhere", out=str(tmp_path / "out"), steps=1, dataset=str(data), eval_every=1)
    train, dev, record = training_data(s, "train", say=False)
    assert record["task"] == "e2e" and [e.task for e in dev] == ["e2e"] * 3


def test_a_sweep_or_tune_scored_on_a_models_training_rows_says_so(e2e_trained, model_dirs, tmp_path):
    """Scores on the rows a model was trained on overstate it on new rows; nothing said it. The record names the
    data set by its absolute path (a user's) or from the repository's root (a shipped model's)."""
    from skipcore.evaluate.sweep.runner import run_sweep
    from skipcore.evaluate.sweep.units import trained_on
    from skipcore.evaluate.tune import TuneSettings, run_tune
    from skipcore.models.reference import resolve_model

    data = tmp_path / "data"
    data.mkdir()
    for split, mark in (("train", "x"), ("test", "")):  # no source in both: a tune's held-out rows are new
        rows = [json.dumps({"source": s + mark, "target": r[0]}) for s, r in SOURCES]
        (data / f"{split}.jsonl").write_text("\n".join(rows) + "\n")
    record_file = e2e_trained / "skipcore_training.json"
    record = json.loads(record_file.read_text())
    record["data"].update(dataset=str(data), split="train")
    record_file.write_text(json.dumps(record))
    ref = resolve_model(str(e2e_trained))
    assert trained_on(ref, data, "train") and trained_on(ref, str(data) + "/", "train")
    assert not trained_on(ref, data, "test") and not trained_on(
        resolve_model(str(model_dirs["opt"])), data, "train"
    )
    cfg = sweep_config(
        model_dirs, data, tmp_path / "s.parquet", model=str(e2e_trained), split="train", targets=(1.0,),
        modes=("skip",), batch_sizes=(1,), policies=("static",), max_new_tokens=2, repeats=0,
    )  # fmt: skip
    with pytest.warns(
        SkipcoreWarning, match=r"e2e-trained was trained on .*\[train\]: scored there, its quality"
    ):
        run_sweep(cfg)
    tune = TuneSettings(
        model=str(e2e_trained), dataset=str(data), split="test", evaluate_split="train", out=tmp_path / "tune",
        limit=3, evaluate_limit=3, batch_size=1, prune_after=0, max_new_tokens=2, trials=1, device="cpu",
        dtype="float32", progress=False, max_drop=100.0, baseline_targets=(2.0,),
    )  # fmt: skip
    with pytest.warns(SkipcoreWarning, match="evaluated there") as said:
        run_tune(tune)
    assert not [w for w in said if "searched there" in str(w.message)]  # the searched split is test
    # a single file has one split, whatever a caller's split says; a shipped model's relative path is found
    record["data"].update(dataset=str(data / "test.jsonl"), split=None)
    record_file.write_text(json.dumps(record))
    assert trained_on(ref, data / "test.jsonl", "test") and not trained_on(ref, data / "train.jsonl", None)
    record["data"].update(dataset="data/e2e_synth", split="train")
    record_file.write_text(json.dumps(record))
    from skipcore.shipped import shipped_path

    assert trained_on(ref, shipped_path("data/e2e_synth"), "train")


def test_a_tunes_slot_metric_is_checked_on_the_rows_as_the_model_reads_them(
    e2e_trained, sweep_dataset, tmp_path
):
    """A slot metric is refused where the model reads the rows without slots (a fine-tune of another task on E2E
    rows: its trials would have no such column), and taken where it reads them as E2E (a JSON-lines copy of E2E
    rows given to an E2E fine-tune), each before any trial."""
    from skipcore.errors import UserError
    from skipcore.evaluate.tune import TuneSettings
    from skipcore.evaluate.tune.runner import Tune

    def tune(model: Path, dataset: Path) -> TuneSettings:
        return TuneSettings(
            model=str(model), dataset=str(dataset), out=tmp_path / "tune", limit=3, batch_size=1, prune_after=0,
            max_new_tokens=3, trials=1, device="cpu", dtype="float32", progress=False, metric="slot_name",
        )  # fmt: skip

    with pytest.warns(SkipcoreWarning, match=WARNED):
        assert Tune(tune(e2e_trained, sweep_dataset), None, None, None).s.metric == "slot_name"
    generic = e2e_trained.parent / "generic-trained"
    e2e_trained.rename(generic)
    record = json.loads((generic / "skipcore_training.json").read_text())
    record["data"]["task"] = "generic"
    (generic / "skipcore_training.json").write_text(json.dumps(record))
    e2e_csv = tmp_path / "e2e.csv"
    pd.DataFrame({"mr": [s for s, _ in SOURCES], "ref": [r[0] for _, r in SOURCES]}).to_csv(
        e2e_csv, index=False
    )
    with pytest.raises(
        UserError, match="slot_name has no slots to check: generic-trained was trained on generic"
    ):
        Tune(tune(generic, e2e_csv), None, None, None)
    assert not (tmp_path / "tune").exists()


def test_scoring_on_the_dev_split_training_found_shared_with_its_rows_says_so(
    e2e_trained, model_dirs, tmp_path
):
    """Training warned that its dev split shares sources with its training rows, and its record keeps the count; a
    sweep or tune scored on that dev split said nothing, though its scores are partly read on training rows."""
    from skipcore.evaluate.sweep.units import dev_shared, warn_training_rows
    from skipcore.models.reference import resolve_model

    data = tmp_path / "data"
    data.mkdir()
    record_file = e2e_trained / "skipcore_training.json"
    record = json.loads(record_file.read_text())
    dev = {"split": "dev", "sources": 12, "shared_with_training": 10, "scored": 12}
    record["data"].update(dataset=str(data), split="train", dev=dev)
    record_file.write_text(json.dumps(record))
    refs = {"m": resolve_model(str(e2e_trained))}
    assert dev_shared(refs["m"], data, "dev") == (10, 12)
    with pytest.warns(
        SkipcoreWarning, match=r"training found 10 of the first 12 sources of .*\[dev\] among its "
    ):
        warn_training_rows(refs, data, "dev", "scored")
    # another split, another data set, a dev split that shares none, a model with no record: nothing to say
    assert dev_shared(refs["m"], data, "test") is None and dev_shared(refs["m"], tmp_path, "dev") is None
    assert dev_shared(resolve_model(str(model_dirs["opt"])), data, "dev") is None
    record["data"]["dev"]["shared_with_training"] = 0
    record_file.write_text(json.dumps(record))
    assert dev_shared(refs["m"], data, "dev") is None
