"""CSV and JSONL traces work outside skipcore: plain pandas reads them with `layer_mask` intact (as text, leading
zeros kept), a frame plain pandas read and wrote back is still a trace, and a zipped CSV or JSONL (one member,
the run metadata in the zip's comment) opens with `pd.read_csv` / `pd.read_json` as it is."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from skipcore import Schedule, SkipEngine, load_model, read_trace, validate_trace, write_trace
from skipcore.commands import main
from skipcore.errors import UserError
from skipcore.lens.files import check_lens_path
from skipcore.traces import TraceSchemaError, sidecar_path
from tests.helpers import PROMPTS, refused


@pytest.fixture(scope="module")
def made(model_dirs):
    model, tok = load_model(str(model_dirs["opt"]), device="cpu", dtype="float32")
    # warmup 0 and a low floor: masks that start with '0', the case plain pandas used to turn into integers
    result = SkipEngine(model, tok).generate(PROMPTS, Schedule(6, "linear", "skip", 6, 2, 0), 8)
    assert result.trace["layer_mask"].str.startswith("0").any()
    return result


def plain_read(path) -> pd.DataFrame:
    name = str(path)
    return pd.read_json(path, lines=True) if ".jsonl" in name else pd.read_csv(path)


@pytest.mark.parametrize("name", ["t.csv", "t.jsonl", "t.csv.zip", "t.jsonl.zip"])
def test_plain_pandas_reads_masks_as_text(made, tmp_path, name):
    path = write_trace(made.trace, tmp_path / name, made.metadata)
    plain = plain_read(path)
    assert pd.api.types.is_string_dtype(plain["layer_mask"])
    assert plain["layer_mask"].str[1:].tolist() == made.trace["layer_mask"].tolist()
    assert plain["token_id"].tolist() == made.trace["token_id"].tolist()
    back, meta = read_trace(path)  # and skipcore's reader gives the schema's masks and the metadata back
    assert back["layer_mask"].tolist() == made.trace["layer_mask"].tolist()
    assert meta["run_id"] == made.metadata["run_id"] and meta["num_layers"] == 6


@pytest.mark.parametrize("name", ["t.parquet", "t.csv", "t.jsonl", "t.csv.zip", "t.jsonl.zip"])
def test_every_format_gives_the_numbers_back_exactly(made, tmp_path, name):
    """Log-probabilities and times read back bit for bit from Parquet and CSV, and to 15 significant digits (the
    most pandas writes) from JSON lines, which kept 10 decimals (5e-11 off)."""
    path = write_trace(made.trace, tmp_path / name, made.metadata)
    back, _ = read_trace(path)
    for column in ("logprob", "step_ms", "flops"):
        got, want = back[column].to_numpy(), made.trace[column].to_numpy()
        if "jsonl" in name:
            np.testing.assert_allclose(got, want, rtol=1e-14, atol=0, err_msg=column)
        else:
            assert got.tobytes() == want.tobytes(), column


@pytest.mark.parametrize("name", ["t.csv", "t.jsonl"])
def test_a_frame_plain_pandas_wrote_back_is_still_a_trace(made, tmp_path, name):
    path = write_trace(made.trace, tmp_path / name, made.metadata)
    plain = plain_read(path)
    plain = plain[plain["sample"] == 1]  # what a user does: filter, then save
    out = tmp_path / f"mine{path.suffix}"
    if path.suffix == ".csv":
        plain.to_csv(out, index=False)
    else:
        plain.to_json(out, orient="records", lines=True)
    sidecar_path(out).write_text(sidecar_path(path).read_text())
    back, _ = read_trace(out)
    mine = made.trace[made.trace["sample"] == 1].reset_index(drop=True)
    pd.testing.assert_frame_equal(back[mine.columns], mine, check_dtype=False)


@pytest.mark.parametrize("name", ["t.csv.zip", "t.jsonl.zip"])
def test_a_zipped_trace_is_inflated_a_block_at_a_time(made, tmp_path, monkeypatch, name):
    """Its member was read whole into memory (a JSONL's, for the nesting check and pyarrow's reader): every read
    of it asks for a block, and the trace reads back as written."""
    path = write_trace(made.trace, tmp_path / name, made.metadata)
    asked, read = [], zipfile.ZipExtFile.read

    def counted(self, n=-1):
        asked.append(n)
        return read(self, n)

    monkeypatch.setattr(zipfile.ZipExtFile, "read", counted)
    back, _ = read_trace(path)
    assert back["token_id"].tolist() == made.trace["token_id"].tolist()
    assert asked and all(n is not None and 0 < n <= 1 << 26 for n in asked), asked  # blocks of 64 MiB at most


def test_zipped_traces_hold_one_file_and_the_metadata_in_their_comment(made, tmp_path):
    path = write_trace(made.trace, tmp_path / "run.csv.zip", made.metadata)
    with zipfile.ZipFile(path) as zf:
        assert zf.namelist() == ["run.csv"]
        assert json.loads(zf.comment)["run_id"] == made.metadata["run_id"]
    assert not sidecar_path(path).exists()
    assert len(pd.read_csv(path)) == len(made.trace)


def test_older_files_with_bare_masks_still_read(made, tmp_path):
    path = tmp_path / "old.csv"
    made.trace.to_csv(path, index=False)  # masks as bare digits, as skipcore wrote them before
    back, _ = read_trace(path)
    assert back["layer_mask"].tolist() == made.trace["layer_mask"].tolist()
    # a frame plain pandas read from such a file is refused with the fix, not a type error
    with pytest.raises(TraceSchemaError, match=r"'layer_mask' must hold text \(read CSV with dtype="):
        validate_trace(pd.read_csv(path))


def test_a_zip_of_a_trace_and_its_sidecar_reads_as_the_trace_with_its_metadata(made, tmp_path):
    """A JSONL trace and its `.meta.json` zipped together (as a user shares a run; the dashboard's upload and the
    lens reader take such a zip): the metadata is the member's, not lost and not refused; a member that is not
    JSON is named."""
    path = write_trace(made.trace, tmp_path / "run.jsonl", made.metadata)
    zipped = tmp_path / "run.jsonl.zip"
    with zipfile.ZipFile(zipped, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.write(path, "run.jsonl")
        zf.write(sidecar_path(path), "run.jsonl.meta.json")
        zf.writestr("README.txt", "notes beside the run")  # another file is left alone
    back, meta = read_trace(zipped)
    assert meta["run_id"] == made.metadata["run_id"] and meta["schedule"] == made.metadata["schedule"]
    pd.testing.assert_frame_equal(back, read_trace(path)[0])
    with zipfile.ZipFile(zipped, "w") as zf:
        zf.write(path, "run.jsonl")
        zf.writestr("run.jsonl.meta.json", "{not json")
    with pytest.raises(TraceSchemaError, match=r"run\.jsonl\.meta\.json is not JSON"):
        read_trace(zipped)
    # the sidecar named by the table's stem, as a user names it zipping the two: read, not taken for no metadata
    with zipfile.ZipFile(zipped, "w") as zf:
        zf.write(path, "run.jsonl")
        zf.write(sidecar_path(path), "run.meta.json")
    assert read_trace(zipped)[1]["run_id"] == made.metadata["run_id"]
    for other in ('{"tool": "other"}', "not json"):  # another tool's file of that name: the trace, without it
        with zipfile.ZipFile(zipped, "w") as zf:
            zf.write(path, "run.jsonl")
            zf.writestr("run.meta.json", other)
        assert read_trace(zipped)[1] == {}


def test_damaged_zips_and_unknown_names_get_one_line(made, tmp_path):
    two = tmp_path / "two.csv.zip"
    with zipfile.ZipFile(two, "w") as zf:
        zf.writestr("a.csv", made.trace.to_csv(index=False))
        zf.writestr("b.csv", made.trace.to_csv(index=False))
    with pytest.raises(TraceSchemaError, match=r"expected one \.csv file in the zip, found a\.csv, b\.csv"):
        read_trace(two)
    broken = tmp_path / "broken.jsonl.zip"
    broken.write_bytes(b"PK not a zip")
    with pytest.raises(TraceSchemaError, match="not a readable jsonl.zip trace"):
        read_trace(broken)
    with pytest.raises(UserError, match="unknown trace format 't.zip'"):
        write_trace(made.trace, tmp_path / "t.zip", made.metadata)
    # a readable table beside a comment that is not metadata: the comment is named, not the table
    commented = write_trace(made.trace, tmp_path / "c.csv.zip", made.metadata)
    with zipfile.ZipFile(commented, "a") as zf:
        zf.comment = b"\xff not json"
    with pytest.raises(
        TraceSchemaError, match="the zip's comment, which holds the run metadata, is not JSON"
    ):
        read_trace(commented)


def test_a_zipped_trace_whose_data_does_not_inflate_is_one_line(made, tmp_path):
    """The reader caught a zip it could not open, not a member it could not unpack: zlib's own error escaped."""
    path = write_trace(made.trace, tmp_path / "d.csv.zip", made.metadata)
    data = bytearray(path.read_bytes())
    start = data.find(b"d.csv") + len("d.csv")  # the member's deflated data, after its local header
    data[start : start + 40] = bytes(b ^ 0x55 for b in data[start : start + 40])
    path.write_bytes(bytes(data))
    with pytest.raises(
        TraceSchemaError, match=r"not a readable csv\.zip trace \(cannot unpack d\.csv: Error -3"
    ):
        read_trace(path)


def test_output_paths_take_zipped_trace_names(tmp_path):
    from skipcore.files import check_output_path
    from skipcore.traces import FORMATS, ZIPPED_FORMATS

    out = check_output_path(str(tmp_path / "t.csv.zip"), False, FORMATS + ZIPPED_FORMATS)
    assert out == tmp_path / "t.csv.zip"
    with pytest.raises(UserError, match="unknown output format 't.csv.zip'"):
        check_output_path(str(tmp_path / "t.csv.zip"), False, FORMATS)


def generate(model_dirs, *argv: str) -> list[str]:
    """`generate` on the tiny OPT model, three new tokens."""
    return [
        "generate",
        "--model",
        str(model_dirs["opt"]),
        "--prompt",
        "MR: x",
        "--max-new-tokens",
        "3",
        *argv,
    ]


# -- a sidecar of the trace's name that the user wrote -------------------------------------------------------
def test_a_users_meta_json_beside_a_trace_is_never_replaced(model_dirs, tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    notes = tmp_path / "t.jsonl.meta.json"
    notes.write_text("notes")
    # said at once, without --overwrite too: 'set --overwrite', then refused with it, sent the user round twice
    for overwrite in ((), ("--overwrite",)):
        err = refused(capsys, generate(model_dirs, "--trace", str(trace), *overwrite))
        assert "t.jsonl.meta.json exists and is not one t.jsonl wrote" in err and "--overwrite" not in err
    assert notes.read_text() == "notes" and not trace.exists()
    with pytest.raises(UserError, match="not one t.jsonl wrote"):  # the library refuses too
        write_trace(pd.DataFrame(), trace, {}, overwrite=True)
    with pytest.raises(UserError, match="not one l.csv wrote"):  # and the lens table beside its own sidecar
        (tmp_path / "l.csv.meta.json").write_text("mine")
        check_lens_path(tmp_path / "l.csv", overwrite=True)
    # its own sidecar, from an earlier run, is replaced with --overwrite (and only with it)
    notes.unlink()
    assert main(generate(model_dirs, "--trace", str(trace), "--quiet")) == 0
    first = json.loads(notes.read_text())["run_id"]
    assert "exists" in refused(capsys, generate(model_dirs, "--trace", str(trace)))
    assert main(generate(model_dirs, "--trace", str(trace), "--quiet", "--overwrite")) == 0
    assert json.loads(notes.read_text())["run_id"] != first and read_trace(trace)[1]["run_id"] != first


@pytest.mark.parametrize("name", ["t.csv", "t.csv.zip", "t.jsonl"])
def test_a_policys_blank_signals_read_back_as_numbers_and_draw(tmp_path, name):
    """CALM's confidence is NaN where a row had ended: CSV writes a blank cell, which the reader (keeping every
    cell as written, so a token "NA" stays text) read back as text, and the explorer's heatmap failed formatting
    it as a number. It reads back as the numbers and NaNs the run had, and draws."""
    from skipcore import CalmPolicy
    from skipcore.plots import exit_heatmap

    engine = SkipEngine(*load_model("data/models/skipdecode-opt-e2e", device="cpu", dtype="float32"))
    result = engine.generate(PROMPTS, CalmPolicy(threshold=0.3), 40)  # rows that end (EOS) at different steps
    assert result.trace["confidence"].isna().any() and result.trace["confidence"].notna().any()
    back, _ = read_trace(write_trace(result.trace, tmp_path / name, result.metadata))
    assert pd.api.types.is_float_dtype(back["confidence"])
    pd.testing.assert_series_equal(back["confidence"], result.trace["confidence"], check_dtype=False)
    assert back["token"].tolist() == result.trace["token"].tolist()
    for sample in back["sample"].unique():
        exit_heatmap(back, sample)


def test_a_file_at_the_path_is_refused_by_the_name_the_caller_gave_overwrite(made, tmp_path, capsys):
    """A trace path where a file stands: from Python the refusal names `overwrite` (the argument), on the command
    line `--overwrite` (it said --overwrite to a Python caller, who has no flags)."""
    path = tmp_path / "t.parquet"
    path.write_bytes(b"")
    with pytest.raises(UserError, match=r"t\.parquet exists; set overwrite to replace it, or choose another"):
        write_trace(made.trace, path, made.metadata)
    said = refused(capsys, ["generate", "--prompt", "MR: x", "--max-new-tokens", "2", "--trace", str(path)])
    assert f"{path} exists; set --overwrite to replace it, or choose another path" in said


def test_overwrite_replaces_only_a_trace_or_a_lens_table(made, tmp_path, capsys):
    """--overwrite is for a run's own output: a data split, a results table or any other file at the path is
    refused in one line and left as it was; a trace (a lens table) is replaced."""
    from skipcore.lens.files import check_lens_path

    data = tmp_path / "test.csv"
    data.write_text("mr,ref\nname[A],A is a pub.\n")
    said = refused(
        capsys,
        ["generate", "--prompt", "MR: x", "--max-new-tokens", "2", "--trace", str(data), "--overwrite"],
    )
    assert f"{data} exists and is not a trace: --overwrite replaces only a trace" in said
    with pytest.raises(UserError, match="is not a lens table: overwrite replaces only a lens table"):
        check_lens_path(data, overwrite=True)  # from Python, the argument's name: there is no flag
    assert data.read_text() == "mr,ref\nname[A],A is a pub.\n"
    trace = write_trace(made.trace, tmp_path / "t.csv", made.metadata)
    assert write_trace(made.trace.head(3), trace, made.metadata, overwrite=True) == trace
    assert len(read_trace(trace)[0]) == 3


@pytest.mark.parametrize("name", ["t.csv", "t.jsonl"])
def test_a_write_that_fails_replaces_neither_the_trace_nor_its_metadata(made, tmp_path, monkeypatch, name):
    """The sidecar was replaced first, then the data write failed (a full disk, `ulimit -f`): the old trace stood
    beside the new run's metadata, and read back as a pair."""
    import skipcore.traces.files as trace_files

    path = write_trace(made.trace, tmp_path / name, made.metadata)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    newer = made.trace.assign(run_id="another")

    def full_disk(target, df, fmt):
        Path(target).write_text("half a ro")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(trace_files, "_write_text", full_disk)
    with pytest.raises(UserError, match="cannot write trace to .*: No space left on device"):
        write_trace(newer, path, {**made.metadata, "run_id": "another"}, overwrite=True)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before  # no temporary file left either
    assert read_trace(path)[1]["run_id"] == made.metadata["run_id"]


def test_a_lens_table_write_that_fails_replaces_neither_file(tmp_path, monkeypatch):
    from skipcore.lens.files import write_lens

    table = pd.DataFrame({"a": [1]})
    side = tmp_path / "l.csv.meta.json"
    monkeypatch.setattr("skipcore.lens.files.validate_lens", lambda df, source: None)
    write_lens(table, tmp_path / "l.csv", {"n": 1, "versions": {"skipcore": "0"}})
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    monkeypatch.setattr(
        pd.DataFrame, "to_csv", lambda self, p, **k: (_ for _ in ()).throw(OSError(27, "File too large"))
    )
    with pytest.raises(UserError, match="File too large"):
        write_lens(table, tmp_path / "l.csv", {"n": 2, "versions": {"skipcore": "0"}}, overwrite=True)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before and side.exists()


def test_a_users_sidecar_beside_an_existing_trace_is_said_before_overwrite(tmp_path):
    """A trace there and a user's .meta.json beside it: 'set overwrite' came first, and with it the sidecar was
    refused."""
    from skipcore.traces.files import check_trace_path

    trace = tmp_path / "t.csv"
    trace.write_text("a,b\n")
    (tmp_path / "t.csv.meta.json").write_text("my notes")
    for overwrite in (False, True):
        with pytest.raises(UserError, match="t.csv.meta.json exists and is not one t.csv wrote"):
            check_trace_path(trace, overwrite=overwrite)
