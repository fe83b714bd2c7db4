"""LoRA fine-tuning (peft): the saved adapter names its base (as it loads from any folder) and loads merged, equal to
the trained model; an interrupted LoRA run resumes to the same losses; only target tokens carry loss; bad LoRA flags
are one line."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from skipcore import SkipEngine, load_model
from skipcore.commands import main
from skipcore.models.lora import LoraSpec, base_name, with_lora
from skipcore.models.training_record import read_record
from skipcore.schedule import full_schedule
from skipcore.training.batching import IGNORE, Pair, collate
from skipcore.training.objective import SkipLM, skip_logits, token_loss
from tests.helpers import ONE_STEP, PROMPTS, REPO

peft = pytest.importorskip("peft", reason="LoRA needs peft (pip install peft)")


def log_losses(out) -> dict[int, dict]:
    rows = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    return {r["step"]: r for r in rows if "loss" in r}


def lora_cli(model_dir, out, *extra: str) -> int:
    args = ["train", "--no-progress", "--threads", "1", "--limit", "12", "--batch-size", "4", "--model"]
    args += [str(model_dir), "--lora-rank", "4", "--lr", "1e-2", "--log-every", "1", "--out", str(out)]
    return main([*args, *extra])


@pytest.fixture(scope="module")
def lora_run(model_dirs, tmp_path_factory):
    """8 steps of elastic skip-aware LoRA training of a Llama-family model, checkpoints at 4 and 8."""
    out = tmp_path_factory.mktemp("lora") / "run"
    flags = ["--elastic", "1:3", "--steps", "8", "--save-every", "4", "--keep-checkpoints", "0"]
    assert lora_cli(model_dirs["llama"], out, *flags) == 0
    return out, flags


def test_a_lora_run_saves_a_small_adapter_that_loads_merged_and_equal_to_the_trained_model(
    model_dirs, lora_run
):
    out, _ = lora_run
    assert (out / "adapter_model.safetensors").is_file() and not (out / "model.safetensors").exists()
    assert base_name(out) == str(model_dirs["llama"])
    settings = read_record(out)
    assert settings["lora"]["rank"] == 4 and settings["lora"]["alpha"] == 8
    assert set(settings["lora"]["modules"]) == {
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
    } | {"down_proj"}
    assert 0 < settings["model"]["trainable_parameters"] < settings["model"]["parameters"] / 5

    merged, tok = load_model(str(out), device="cpu", dtype="float32")
    base, _ = load_model(str(model_dirs["llama"]), device="cpu", dtype="float32")
    # the same adapter applied by peft itself, unmerged: the merge changes no logit
    reference = peft.PeftModel.from_pretrained(base, str(out)).eval()
    enc = tok(PROMPTS, return_tensors="pt", padding=True)
    with torch.no_grad():
        got = merged(**enc).logits
        want = reference(**enc).logits
        plain = reference.get_base_model()
        with reference.disable_adapter():
            before = plain(**enc).logits
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    assert not torch.allclose(got, before, atol=1e-3)  # training changed the model
    assert SkipEngine(merged, tok).generate(PROMPTS[:1], max_new_tokens=4).token_ids


def test_an_interrupted_lora_run_resumes_to_the_same_losses(model_dirs, lora_run, tmp_path):
    out, flags = lora_run
    ckpt = out / "checkpoints" / "step-0000004"
    assert (ckpt / "adapter_model.safetensors").is_file() and (ckpt / "optimizer.pt").is_file()
    # the checkpoint's own tokenizer is the one the run goes on with, as loading the folder would take it
    config = ckpt / "tokenizer_config.json"
    saved = json.loads(config.read_text())
    config.write_text(json.dumps({**saved, "model_max_length": 777}))
    resumed = tmp_path / "resumed"
    assert lora_cli(model_dirs["llama"], resumed, *flags, "--resume", str(ckpt)) == 0
    assert json.loads((resumed / "tokenizer_config.json").read_text())["model_max_length"] == 777
    first, again = log_losses(out), log_losses(resumed)
    assert sorted(again) == [5, 6, 7, 8]
    for step, r in again.items():
        assert r["loss"] == pytest.approx(first[step]["loss"], abs=1e-5)
        assert r["lr"] == pytest.approx(first[step]["lr"])


def test_only_target_tokens_carry_loss(model_dirs):
    """The loss is the mean cross-entropy of the target tokens (EOS included) given everything before them,
    whatever the prompt's own tokens would cost: changing how likely the prompt is changes nothing."""
    model, tok = load_model(str(model_dirs["llama"]), device="cpu", dtype="float32")
    lm = SkipLM(model).eval()
    pairs = [Pair((5, 6, 7, 8), (9, 10, 2)), Pair((11, 12), (13, 2))]
    batch = collate(pairs, tok.pad_token_id)
    with torch.no_grad():
        total, n = token_loss(skip_logits(lm, batch, full_schedule(lm.num_layers)), batch.labels)
    assert int(n) == 5 and int((batch.labels != IGNORE).sum()) == 5
    by_hand = []
    for p in pairs:
        ids = torch.tensor([p.prompt_ids + p.target_ids])
        with torch.no_grad():
            logits = model(ids).logits[0]
        start = len(p.prompt_ids) - 1  # the column that predicts the first target token
        by_hand.append(F.cross_entropy(logits[start:-1], ids[0, start + 1 :], reduction="sum"))
    torch.testing.assert_close(total, torch.stack(by_hand).sum(), rtol=1e-4, atol=1e-4)


def test_lora_targets_by_group_or_name_and_bad_flags_are_one_line(model_dirs, tmp_path, capsys):
    model, _ = load_model(str(model_dirs["opt"]), device="cpu", dtype="float32")
    assert LoraSpec(2, targets=("attention",)).modules("opt") == ["q_proj", "k_proj", "v_proj", "out_proj"]
    wrapped = with_lora(model, LoraSpec(2, targets=("fc1",)), base="x")
    assert sorted(wrapped.peft_config["default"].target_modules) == ["fc1"]
    model, _ = load_model(str(model_dirs["opt"]), device="cpu", dtype="float32")
    capsys.readouterr()  # the loads' own progress bars (shown where no test before turned them off)
    cases = [
        (["--lora-rank", "0"], "--lora-rank must be >= 1"),
        (["--lora-rank", "2", "--lora-targets", "nonsense"], "no such module"),
        (["--lora-dropout", "1.5", "--lora-rank", "2"], "--lora-dropout must be in [0, 1)"),
        (["--lora-alpha", "0"], "--lora-alpha needs --lora-rank"),
    ]
    for extra, message in cases:
        out = tmp_path / f"o{len(message)}"
        args = ["train", "--no-progress", "--limit", "4", *ONE_STEP, "--model", str(model_dirs["opt"])]
        assert main([*args, "--out", str(out), *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err
    assert main(["train", "--init-config", "opt", "--lora-rank", "2", "--out", str(tmp_path / "s")]) == 2
    assert "pretrained --model" in capsys.readouterr().err


def test_whole_layers_train_every_weight_of_those_layers_beside_lora_and_resume(model_dirs, tmp_path, capsys):
    """`--whole-layers` trains chosen decoder layers whole (norms included) and LoRA on the others; the folder
    loads merged, equal to peft's own unmerged model, and a resumed run continues to the same losses."""
    from safetensors import safe_open

    out = tmp_path / "whole"
    flags = ["--steps", "4", "--save-every", "2", "--keep-checkpoints", "0", "--schedule", "linear"]
    flags += ["--target-speedup", "2", "--whole-layers", "5"]  # the top layer of six: every schedule runs it
    assert lora_cli(model_dirs["llama"], out, *flags) == 0
    assert "parameters (LoRA; model.layers.5 whole) on" in capsys.readouterr().err
    settings = read_record(out)
    assert settings["lora"]["whole_layers"] == [5] and settings["args"]["whole_layers"] == [5]
    with safe_open(str(out / "adapter_model.safetensors"), "pt") as f:
        keys = set(f.keys())
    top = {k for k in keys if ".layers.5." in k}
    assert top and not any("lora_" in k for k in top) and any("input_layernorm" in k for k in top)
    assert all(any(f".layers.{i}." in k and "lora_A" in k for k in keys) for i in range(5))

    merged, tok = load_model(str(out), device="cpu", dtype="float32")
    base, _ = load_model(str(model_dirs["llama"]), device="cpu", dtype="float32")
    before = {k: v.clone() for k, v in base.state_dict().items()}
    reference = peft.PeftModel.from_pretrained(base, str(out)).eval()
    enc = tok(PROMPTS, return_tensors="pt", padding=True)
    with torch.no_grad():
        torch.testing.assert_close(merged(**enc).logits, reference(**enc).logits, rtol=1e-4, atol=1e-5)
    after = merged.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert {k for k in before if ".layers.5." in k} <= changed  # every weight of the whole layer, norms too
    assert not any(
        "layernorm" in k and ".layers.5." not in k for k in changed
    )  # LoRA leaves the others' norms
    assert any(".layers.0.self_attn.q_proj" in k for k in changed)

    resumed = tmp_path / "resumed"
    assert (
        lora_cli(model_dirs["llama"], resumed, *flags, "--resume", str(out / "checkpoints/step-0000002")) == 0
    )
    first, again = log_losses(out), log_losses(resumed)
    assert sorted(again) == [3, 4]
    for step, r in again.items():
        assert r["loss"] == pytest.approx(first[step]["loss"], abs=1e-5)

    capsys.readouterr()
    for extra, message in [
        (["--whole-layers", "6"], "--whole-layers 6: this model has layers 0 to 5"),
        (["--whole-layers", "0,1,2,3,4,5"], "--whole-layers names every layer"),
        (["--whole-layers", "1,1"], "--whole-layers takes distinct layer indices"),
    ]:
        assert lora_cli(model_dirs["llama"], tmp_path / "bad", *ONE_STEP, *extra) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err
    with pytest.raises(SystemExit):  # argparse's own one line
        lora_cli(model_dirs["llama"], tmp_path / "bad", "--whole-layers", "top")
    assert "argument --whole-layers: must be a comma-separated list" in capsys.readouterr().err
    args = ["train", "--no-progress", *ONE_STEP, "--model", str(model_dirs["llama"]), "--whole-layers", "1"]
    assert main([*args, "--out", str(tmp_path / "bad")]) == 2
    assert "--whole-layers needs --lora-rank" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()


def test_an_adapter_trained_on_a_base_given_by_a_relative_path_loads_from_any_folder(
    model_dirs, tmp_path, capsys, monkeypatch
):
    """The adapter names its base as it loads from anywhere: a local folder by its absolute path (a real model by
    its short name, a hub id as given), and the run says which."""
    from skipcore.training.settings import portable_name

    out = tmp_path / "adapter"
    monkeypatch.chdir(model_dirs["llama"].parent)
    capsys.readouterr()
    assert lora_cli("llama", out, *ONE_STEP, "--dataset", str(REPO / "data/e2e_synth")) == 0
    assert f"a LoRA adapter on {model_dirs['llama']})" in capsys.readouterr().err
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert base_name(out) == str(model_dirs["llama"])
    record = read_record(out)
    assert (
        record["lora"]["base"]
        == record["init"]["model"]
        == record["args"]["model"]
        == str(model_dirs["llama"])
    )
    model, tok = load_model(str(out), device="cpu", dtype="float32")
    assert SkipEngine(model, tok).generate(PROMPTS[:1], max_new_tokens=2).token_ids
    (
        elsewhere / "smollm2-135m"
    ).mkdir()  # a folder of a real model's name: the short name still wins, as it loads
    assert portable_name("smollm2-135m") == "smollm2-135m" and portable_name("org/model") == "org/model"


def test_a_saved_adapter_trains_on_from_its_own_weights_and_names_its_first_base(
    model_dirs, lora_run, tmp_path, capsys, monkeypatch
):
    """`--model ADAPTER --lora-rank R` trains that adapter on (a shipped model has no checkpoint to resume): its
    weights are where training starts, not a fresh adapter's zeros, and the folder saved names the base the
    adapter was trained on, so it loads alone. Other LoRA settings than the adapter's are one line, before any
    work."""
    from safetensors.torch import load_file

    first, _ = lora_run
    on = tmp_path / "on"
    # a learning rate that moves no weight measurably: what is saved is where the run started
    assert lora_cli(first, on, *ONE_STEP, "--lr", "1e-12", "--warmup-ratio", "0") == 0
    assert base_name(on) == base_name(first) == str(model_dirs["llama"])
    record = read_record(on)
    assert record["init"]["from"] == "adapter" and record["init"]["adapter"] == str(first)
    assert record["init"]["parent"]["state"]["step"] == 8
    saved, started = (
        load_file(str(first / "adapter_model.safetensors")),
        load_file(str(on / "adapter_model.safetensors")),
    )
    assert saved.keys() == started.keys()
    lora_b = [k for k in saved if "lora_B" in k]
    assert lora_b and all(saved[k].abs().max() > 0 for k in lora_b)  # a fresh adapter's B would be zeros
    for k in saved:
        torch.testing.assert_close(started[k], saved[k], rtol=0, atol=1e-8)

    # such a run resumes from its own checkpoints as any run does, to the same losses
    onward = tmp_path / "onward"
    flags = ["--steps", "4", "--save-every", "2", "--keep-checkpoints", "0"]
    assert lora_cli(first, onward, *flags) == 0
    resumed = tmp_path / "resumed"
    assert lora_cli(first, resumed, *flags, "--resume", str(onward / "checkpoints/step-0000002")) == 0
    assert read_record(resumed)["init"]["from"] == "adapter" and base_name(resumed) == base_name(first)
    again, whole = log_losses(resumed), log_losses(onward)
    assert sorted(again) == [3, 4]
    for step, r in again.items():
        assert r["loss"] == pytest.approx(whole[step]["loss"], abs=1e-5)

    import skipcore.training.models as training_models

    def no_weights(*args, **kwargs):
        raise AssertionError("weights loaded before the settings were checked")

    monkeypatch.setattr(training_models, "load_for_training", no_weights)  # refused from the config alone
    capsys.readouterr()
    for extra, message in [
        (["--lora-rank", "8"], "--lora-rank: the adapter in"),
        (["--whole-layers", "5"], "--whole-layers: the adapter in"),
        (["--lora-targets", "attention"], "--lora-targets: the adapter in"),
    ]:
        bad = tmp_path / f"bad{len(extra[1])}{extra[0]}"
        assert lora_cli(first, bad, *ONE_STEP, *extra) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err
        assert err[0].endswith(
            "its own: --lora-rank 4 --lora-alpha 8 --lora-dropout 0.05 --lora-targets attention,mlp (or train a new "
            "adapter on its base)"
        ), err
        assert not bad.exists()


@pytest.mark.parametrize("target", ["lm_head", "embed_tokens"])
def test_a_lora_on_a_tied_weight_is_refused_to_train_and_to_load(model_dirs, tmp_path, capsys, target):
    """OPT ties its output embeddings to its input embeddings: a LoRA on `lm_head` trained the head alone, but
    merged on loading it changed the input embeddings too, and the model loaded was not the one trained. Training
    one is refused in one line; an adapter made so elsewhere (peft itself) is refused when it loads."""
    from skipcore.errors import ModelError
    from skipcore.models.lora import save_adapter

    model, _ = load_model(str(model_dirs["opt"]), device="cpu", dtype="float32")
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    capsys.readouterr()  # the load's own progress
    args = ["train", "--no-progress", "--limit", "4", *ONE_STEP, "--model", str(model_dirs["opt"])]
    assert main([*args, "--out", str(tmp_path / "o"), "--lora-rank", "2", "--lora-targets", target]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--lora-targets: " in err[0] and "is tied to" in err[0], err
    assert not (tmp_path / "o").exists()

    from skipcore.models.lora import tied_targets

    # a LoRA layer's `weight` is its wrapped layer's: no tie (only the module's own weight is asked)
    wrapped = with_lora(
        load_model(str(model_dirs["opt"]), device="cpu", dtype="float32")[0], LoraSpec(2), "x"
    )
    assert tied_targets(wrapped, ["q_proj", "fc1"]) == [] and tied_targets(model, [target])
    made = peft.get_peft_model(model, peft.LoraConfig(r=2, target_modules=[target], init_lora_weights=False))
    made.peft_config["default"].base_model_name_or_path = str(model_dirs["opt"])
    (tmp_path / "a").mkdir()
    save_adapter(made, tmp_path / "a")
    with pytest.raises(
        ModelError,
        match=r"has a LoRA on .*'s weight is tied to .* the model loaded would not be the one trained",
    ):
        load_model(str(tmp_path / "a"), device="cpu", dtype="float32")


@pytest.mark.parametrize(
    ("target", "names"),
    [
        ("self_attn", "q_proj, k_proj, v_proj, o_proj"),
        ("layers", "q_proj, k_proj, v_proj, o_proj, gate_proj"),
    ],
)
def test_a_container_target_is_refused_in_one_line_naming_its_projections_before_weights_load(
    model_dirs, tmp_path, capsys, monkeypatch, target, names
):
    """`self_attn` or `layers` name modules that hold projections, which peft cannot wrap (it raised its own
    ValueError traceback); the refusal names the setting and the projections under the container to name, and
    comes before the model's weights load."""
    from skipcore.errors import UserError
    from skipcore.training import models as training_models
    from skipcore.training.settings import TrainSettings
    from skipcore.training.train import train

    def no_load(*args, **kwargs):
        raise AssertionError("the model's weights loaded before the targets were checked")

    monkeypatch.setattr(training_models, "load_for_training", no_load)
    args = ["train", "--no-progress", "--limit", "4", *ONE_STEP, "--model", str(model_dirs["llama"])]
    assert main([*args, "--out", str(tmp_path / "o"), "--lora-rank", "4", "--lora-targets", target]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: --lora-targets {target}: "), err
    assert "not a layer LoRA can wrap" in err[0] and names in err[0], err
    assert not (tmp_path / "o").exists()

    settings = TrainSettings(
        model=str(model_dirs["llama"]), out=str(tmp_path / "p"), limit=4, steps=1, warmup_ratio=0.0, lora_rank=4,
        lora_targets=target, no_progress=True,
    )  # fmt: skip
    with pytest.raises(UserError, match=f"lora_targets {target}: .*{names}") as e:
        train(settings)
    assert e.value.field == "lora_targets"


def test_a_norm_target_is_refused_in_one_line(model_dirs, tmp_path, capsys):
    args = ["train", "--no-progress", "--limit", "4", *ONE_STEP, "--model", str(model_dirs["opt"])]
    extra = ["--lora-rank", "2", "--lora-targets", "final_layer_norm"]
    assert main([*args, "--out", str(tmp_path / "o"), *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        len(err) == 1 and "final_layer_norm: " in err[0] and "is a LayerNorm, not a layer LoRA" in err[0]
    ), err
