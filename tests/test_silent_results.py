"""No silent wrong number (issue 24, cases 7-12): weights that do not fit their config (plain folders and LoRA
adapters), grid values that would drop out of a sweep, a resume that would train on other data, the public API
called with the wrong kinds of argument, traces whose rows are duplicated or out of order, and a model whose
logits are NaN are each refused in one line instead of giving a number."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from safetensors.torch import load_file, save_file

from skipcore import SkipEngine, load_model
from skipcore.commands import main
from skipcore.errors import ArgumentTypeError, UserError
from skipcore.evaluate.settings import check_config
from skipcore.models.testing import make_tiny_model
from skipcore.models.training_record import read_record
from skipcore.policies import StaticPolicy
from skipcore.traces import TraceSchemaError, read_trace, write_trace
from tests.conftest import refused, train_argv
from tests.test_sweep import config


def with_config(src: Path, dst: Path, **fields) -> Path:
    shutil.copytree(src, dst)
    config = json.loads((dst / "config.json").read_text())
    (dst / "config.json").write_text(json.dumps({**config, **fields}))
    return dst


# -- 7: a config that claims more layers than the weights hold --------------------------------------------------
def test_weights_missing_from_a_model_folder_are_an_error_not_a_half_random_model(
    model_dirs, tmp_path, capsys
):
    deeper = with_config(model_dirs["opt"], tmp_path / "deeper", num_hidden_layers=12)
    with pytest.raises(UserError, match="layers 6-11 of the 12 config.json declares have none"):
        load_model(str(deeper), device="cpu")
    argv = ["generate", "--model", str(deeper), "--prompt", "MR: x", "--max-new-tokens", "2"]
    assert "its weights do not match its config.json" in refused(capsys, argv)
    # the other way round: weights the model has no place for
    shallower = with_config(model_dirs["opt"], tmp_path / "shallower", num_hidden_layers=3)
    with pytest.raises(UserError, match="no place in the model"):
        load_model(str(shallower), device="cpu")


def test_a_lora_adapter_that_does_not_fit_its_base_is_one_line(model_dirs, tmp_path, capsys):
    pytest.importorskip("peft")
    from skipcore.models.lora import LoraSpec, save_adapter, with_lora

    model, _ = load_model(str(model_dirs["opt"]), device="cpu", dtype="float32")
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    save_adapter(with_lora(model, LoraSpec(2), base=str(model_dirs["opt"])), adapter)
    assert load_model(str(adapter), device="cpu")[0].config.num_hidden_layers == 6  # it fits its own base
    for layers, words in (
        (12, "tensors the base's modules need are missing"),
        (3, "have no place in the base"),
    ):
        base = make_tiny_model("opt", tmp_path / f"opt{layers}", num_layers=layers)
        moved = shutil.copytree(adapter, tmp_path / f"on{layers}")
        cfg = json.loads((moved / "adapter_config.json").read_text())
        (moved / "adapter_config.json").write_text(json.dumps({**cfg, "base_model_name_or_path": str(base)}))
        argv = ["generate", "--model", str(moved), "--prompt", "MR: x", "--max-new-tokens", "2"]
        err = refused(capsys, argv)
        assert "does not fit its base model" in err and words in err, err


# -- 8: a grid value that would silently drop a row --------------------------------------------------------------
def test_non_finite_or_out_of_range_grid_values_are_refused(model_dirs, tmp_path, capsys):
    out = tmp_path / "s.parquet"
    base = ["sweep", "--model", str(model_dirs["opt"]), "--out", str(out), "--repeats", "0"]
    for flag, value in (("--targets", "nan"), ("--targets", "1,inf"), ("--calm-thresholds", "nan")):
        assert "must be finite numbers" in refused(capsys, [*base, flag, value])
    assert "--targets must all be >= 1" in refused(capsys, [*base, "--targets", "0.5"])
    assert not out.exists()
    dataset = tmp_path / "d.jsonl"
    dataset.write_text('{"source": "a", "target": "b"}\n')
    with pytest.raises(UserError, match="--targets must all be finite numbers >= 1"):  # the API too
        check_config(config(model_dirs, dataset, out, targets=(1.0, float("nan"))))
    with pytest.raises(UserError, match="--speculative-targets"):
        check_config(config(model_dirs, dataset, out, speculative_targets=(float("inf"),)))


# -- 9: a resume with no other flags trains the run it resumes ---------------------------------------------------
def test_a_bare_resume_takes_the_runs_own_settings(model_dirs, tmp_path, capsys):
    data = tmp_path / "mine.jsonl"
    data.write_text("".join(json.dumps({"source": f"s{i}", "target": f"t {i} x"}) + "\n" for i in range(10)))
    out = tmp_path / "run"
    flags = ["--dataset", str(data), "--batch-size", "4", "--steps", "4", "--lr", "1e-3", "--save-every", "2"]
    assert (
        main(train_argv(model_dirs["opt"], out, *flags, "--log-every", "1", "--keep-checkpoints", "0")) == 0
    )
    first = read_record(out)
    losses = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    shutil.rmtree(out / "checkpoints" / "step-0000004")  # as if the run had stopped after step 2
    capsys.readouterr()
    assert main(["train", "--resume", str(out / "checkpoints"), "--out", str(out), "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "with its run's own" in err and "--dataset" in err and "warning" not in err
    again = read_record(out)
    assert again["data"]["dataset"] == str(data) and again["data"]["pairs"] == first["data"]["pairs"] == 10
    assert again["state"]["step"] == 4 and again["training"] == first["training"]
    redone = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert [r["loss"] for r in redone] == pytest.approx([r["loss"] for r in losses], abs=1e-5)


# -- 10: the public API's argument kinds ---------------------------------------------------------------------------
def test_the_engine_refuses_arguments_of_the_wrong_kind_at_the_door(model_dirs):
    engine = SkipEngine(*load_model(str(model_dirs["opt"]), device="cpu"))
    cases = [
        (("MR: x",), {}, "wrap one prompt in a list"),
        ((["MR: x"], "linear"), {}, "got str 'linear'"),
        ((["MR: x"], 3), {}, "got int 3"),
        ((["MR: x"], [[0, 1], "ab"]), {}, "per-step layer sets"),
        ((["MR: x"], None, 4.0), {}, "max_new_tokens must be a whole number"),
        ((["MR: x"], None, 2), {"batch_size": "2"}, "batch_size must be a whole number"),
        ((["MR: x"], None, 2), {"sampling": {"do_sample": True}}, "Sampling"),
    ]
    for args, kw, words in cases:
        with pytest.raises(ArgumentTypeError, match=words) as e:
            engine.generate(*args, **kw)
        assert isinstance(e.value, TypeError) and "\n" not in str(e.value)
    assert len(engine.generate(["MR: x"], StaticPolicy(), 2).texts) == 1  # the right kinds still work
    assert len(engine.generate(("MR: x", "MR: y"), [[0, 1, 2, 3, 4, 5], [0, 5]], 2).texts) == 2


# -- 11: a trace whose rows are duplicated or out of order ------------------------------------------------------
@pytest.fixture(scope="module")
def trace(model_dirs):
    engine = SkipEngine(*load_model(str(model_dirs["opt"]), device="cpu"))
    result = engine.generate(["MR: x", "MR: name[Aromi]"], None, 4)
    return result.trace, result.metadata


def corruptions(df: pd.DataFrame) -> dict[str, pd.DataFrame]:
    permuted = df.copy()
    first = permuted["sample"] == 0
    permuted.loc[first, "step"] = permuted.loc[first, "step"].to_numpy()[::-1]
    return {
        "every row twice": pd.concat([df, df], ignore_index=True),
        "one row twice": pd.concat([df, df.iloc[[3]]], ignore_index=True),
        "steps permuted": permuted,
        "rows reordered": df.iloc[::-1].reset_index(drop=True),
        "a middle row dropped": df.drop(index=1).reset_index(drop=True),
        "unfinished after finished": df.assign(finished=[i % 2 == 0 for i in range(len(df))]),
    }


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_duplicated_or_reordered_trace_rows_are_refused(trace, tmp_path, fmt):
    df, meta = trace
    for name, bad in corruptions(df).items():
        path = tmp_path / f"{name.replace(' ', '_')}.{fmt}"
        if fmt == "parquet":
            bad.to_parquet(path)
        else:
            bad.assign(layer_mask="m" + bad["layer_mask"]).to_csv(path, index=False)
        with pytest.raises(TraceSchemaError) as e:
            read_trace(path)
        assert "\n" not in str(e.value), name
    write_trace(df, tmp_path / f"good.{fmt}", meta)  # the trace as generated still reads back
    assert len(read_trace(tmp_path / f"good.{fmt}")[0]) == len(df)


def test_the_dashboards_upload_refuses_a_doubled_trace(trace, tmp_path):
    from app.dashboard.tracefiles import read_uploaded_trace

    df, _ = trace
    doubled = tmp_path / "doubled.parquet"
    pd.concat([df, df], ignore_index=True).to_parquet(doubled)
    with pytest.raises(TraceSchemaError, match="appears more than once"):
        read_uploaded_trace("doubled.parquet", doubled.read_bytes(), 10**8)


# -- 12: NaN weights ---------------------------------------------------------------------------------------------------
def test_non_finite_logits_are_said_before_anything_is_written(model_dirs, tmp_path, capsys):
    broken = shutil.copytree(model_dirs["opt"], tmp_path / "nan")
    weights = load_file(str(broken / "model.safetensors"))
    key = next(k for k in weights if "layers.2.fc1.weight" in k)
    weights[key][:] = float("nan")
    save_file(weights, str(broken / "model.safetensors"), metadata={"format": "pt"})
    trace = tmp_path / "t.jsonl"
    for extra in ([], ["--trace", str(trace)]):
        argv = ["generate", "--model", str(broken), "--prompt", "MR: x", "--max-new-tokens", "3", *extra]
        err = refused(capsys, argv)
        assert "logits are not finite" in err and "step 0 of prompt 0" in err
    assert not trace.exists() and not (tmp_path / "t.jsonl.meta.json").exists()
    with pytest.raises(UserError, match="not finite"):
        SkipEngine(*load_model(str(broken), device="cpu")).generate(["MR: x"], None, 2)
