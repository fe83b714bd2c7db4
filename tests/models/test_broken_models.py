"""Model files that cannot be used: each is one line naming the file or tensor and what to do, never a
traceback or a half-random model."""

from __future__ import annotations

import json
import shutil

import pytest

from skipcore import load_model
from skipcore.adapters import SUPPORTED
from skipcore.errors import UserError
from skipcore.models.testing import make_tiny_model
from tests.helpers import generate_refused, refused


def test_broken_model_files_are_said_with_what_to_do():
    import pickle

    from safetensors import SafetensorError

    from skipcore.models.loading import broken_file_reason

    said = broken_file_reason(SafetensorError("Error while deserializing header: incomplete metadata"))
    assert said.endswith("(the weights file is damaged or incomplete; copy or save it again)")
    said = broken_file_reason(
        pickle.UnpicklingError("Weights only load failed. Unsupported global: os.system")
    )
    assert "weights_only; nothing in it ran" in said and "safe_serialization=True" in said
    assert (
        broken_file_reason(OSError("no file named model.safetensors\nmore"))
        == "no file named model.safetensors"
    )


def test_broken_model_folders_get_one_line(model_dirs, tmp_path, capsys):
    import shutil

    import torch

    src = model_dirs["opt"]
    notok = shutil.copytree(src, tmp_path / "notok", ignore=shutil.ignore_patterns("tokenizer*", "vocab*"))
    trunc = shutil.copytree(src, tmp_path / "trunc")
    weights = trunc / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    evil = shutil.copytree(src, tmp_path / "evil", ignore=shutil.ignore_patterns("*.safetensors"))
    ran = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (open, (str(ran), "w"))

    torch.save({"x": Payload()}, evil / "pytorch_model.bin")
    for folder, words in (
        (notok, "no tokenizer files"),
        (trunc, "could not load model"),
        (evil, "weights_only"),
    ):
        assert words in generate_refused(capsys, "--model", str(folder), "--prompt", "MR: x")
    assert not ran.exists()  # the pickle's payload never ran


def test_a_pickle_of_another_protocol_is_refused_without_torchs_warning_before_the_line(
    model_dirs, tmp_path, capsys
):
    """A pickle written by Python's own pickle (protocol 4, not torch.save's 2) drew torch's 'Detected pickle
    protocol 4' warning, two lines of a file's internals, before the one line that refuses it."""
    import pickle
    import shutil
    import warnings

    folder = shutil.copytree(
        model_dirs["opt"], tmp_path / "p4", ignore=shutil.ignore_patterns("*.safetensors")
    )
    ran = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (open, (str(ran), "w"))

    (folder / "pytorch_model.bin").write_bytes(pickle.dumps({"x": Payload()}, protocol=4))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert "weights_only" in generate_refused(capsys, "--model", str(folder), "--prompt", "MR: x")
    assert not [str(w.message) for w in caught if "pickle protocol" in str(w.message)]
    assert not ran.exists()


def with_config(src, dst, **fields):
    import shutil

    shutil.copytree(src, dst)
    config = json.loads((dst / "config.json").read_text())
    (dst / "config.json").write_text(json.dumps({**config, **fields}))
    return dst


def test_a_config_field_of_the_wrong_type_is_one_line_everywhere(model_dirs, tmp_path, capsys):
    from skipcore import load_model
    from skipcore.errors import ModelError

    folder = with_config(model_dirs["opt"], tmp_path / "m", num_hidden_layers="12")
    said = "a config.json field of the wrong type: Field 'num_hidden_layers' expected int, got str"
    for command in ("generate", "lens"):
        argv = [command, "--model", str(folder), "--prompt", "MR: x", "--max-new-tokens", "2"]
        assert said in refused(capsys, argv)
    with pytest.raises(ModelError, match=said):
        load_model(str(folder), device="cpu")


@pytest.mark.parametrize(
    "field, value, words",
    [
        ("hidden_size", 32, "[514, 64] in the weights, [514, 32] by config.json"),
        ("max_position_embeddings", 256, "[514, 64] in the weights, [258, 64] by config.json"),
    ],
)
def test_a_config_whose_sizes_do_not_fit_the_weights_names_a_tensor(
    model_dirs, tmp_path, capsys, field, value, words
):
    folder = with_config(model_dirs["opt"], tmp_path / "m", **{field: value})
    err = refused(capsys, ["generate", "--model", str(folder), "--prompt", "MR: x", "--max-new-tokens", "2"])
    assert "its weights do not match its config.json" in err and words in err and "above report" not in err


# -- a config that claims more layers than the weights hold --------------------------------------------------
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


# -- adapters that cannot be used ----------------------------------------------------------------------------
@pytest.fixture
def llama_adapter(model_dirs, tmp_path):
    """A rank-2 LoRA adapter of the tiny Llama model, saved; and a way to copy it with its config edited."""
    pytest.importorskip("peft")
    from skipcore.models.lora import LoraSpec, save_adapter, with_lora

    model, _ = load_model(str(model_dirs["llama"]), device="cpu", dtype="float32")
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    save_adapter(with_lora(model, LoraSpec(2), base=str(model_dirs["llama"])), adapter)

    def copy(name: str, **config):
        moved = shutil.copytree(adapter, tmp_path / name)
        cfg = json.loads((moved / "adapter_config.json").read_text())
        (moved / "adapter_config.json").write_text(json.dumps({**cfg, **config}))
        return moved

    return copy


@pytest.mark.parametrize("family", ["gpt2", "opt", "llama", "gemma3"])
def test_an_adapter_of_its_own_base_passes_the_header_check_and_loads(model_dirs, tmp_path, family):
    """The check of an adapter's shapes from its file's header and its base's config takes every adapter made for
    its base (GPT-2's products store their weight (input, output); a layer trained whole saves whole tensors), so
    only an adapter made for another model is refused before a load (it refused every GPT-2 adapter)."""
    pytest.importorskip("peft")
    from skipcore.models.loading import load_config
    from skipcore.models.lora import LoraSpec, adapter_misfit, save_adapter, with_lora

    model, _ = load_model(str(model_dirs[family]), device="cpu", dtype="float32")
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    save_adapter(with_lora(model, LoraSpec(2, whole_layers=(5,)), base=str(model_dirs[family])), adapter)
    assert adapter_misfit(adapter, load_config(str(model_dirs[family]))) is None
    assert load_config(str(adapter)).model_type == model.config.model_type
    assert load_model(str(adapter), device="cpu")[0].config.model_type == model.config.model_type


def test_an_adapter_whose_base_leads_back_to_itself_is_one_line(llama_adapter, tmp_path, capsys):
    from skipcore.errors import ModelError
    from skipcore.models.loading import load_config
    from skipcore.models.reference import resolve_model

    own = llama_adapter("own", base_model_name_or_path=str(tmp_path / "own"))
    said = generate_refused(capsys, "--model", str(own), "--prompt", "MR: x")
    assert said == (  # said by the flag that named the model
        f"--model: {own / 'adapter_config.json'}: base_model_name_or_path names its own folder; "
        "it must name the model the adapter was trained on"
    )
    first = llama_adapter("first", base_model_name_or_path=str(tmp_path / "second"))
    llama_adapter("second", base_model_name_or_path=str(first))
    for attempt in (resolve_model, load_config, load_model):
        with pytest.raises(
            ModelError, match="base_model_name_or_path names .*, an adapter whose base leads back"
        ):
            attempt(str(first))


def test_a_damaged_adapter_weights_file_is_one_line_naming_it(llama_adapter, capsys):
    from skipcore.errors import ModelError
    from skipcore.models.reference import resolve_model

    cut = llama_adapter("cut")
    weights = cut / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    said = generate_refused(capsys, "--model", str(cut), "--prompt", "MR: x")
    assert (
        said.startswith(f"--model: {weights} is damaged or incomplete: it holds ") and "save or copy" in said
    )
    with pytest.raises(ModelError, match="is damaged or incomplete"):
        resolve_model(str(cut))  # known before its base loads
    weights.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all}")
    said = generate_refused(capsys, "--model", str(cut), "--prompt", "MR: x")
    assert (
        said
        == f"--model: {weights} is damaged or incomplete: its header is not valid; save or copy the adapter again"
    )


def test_an_adapter_on_a_base_of_other_shapes_names_a_tensor(llama_adapter, tmp_path, capsys):
    """An adapter made for another model (the tiny Llama's on a Gemma 3 base, whose attention is wider) is
    refused naming a tensor, its shape in the file and the one the base needs, from its file's header and the
    base's config before any weights are read: by what reads only a config (the dashboard's designer, a sweep's
    plan), which took the base's shapes, as by a load (torch's "Error(s) in loading state_dict" there)."""
    from skipcore.errors import ModelError
    from skipcore.models.loading import load_config
    from skipcore.models.lora import merged

    gemma = make_tiny_model("gemma3", tmp_path / "gemma")
    moved = llama_adapter("on-gemma", base_model_name_or_path=str(gemma))
    said = generate_refused(capsys, "--model", str(moved), "--prompt", "MR: x")
    assert said.startswith(f"the adapter in {moved} does not fit its base model: "), said
    assert "e.g. base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight: [64, 2] in " in said, said
    assert "adapter_model.safetensors, [128, 2] for the base" in said and "Error(s)" not in said, said
    with pytest.raises(ModelError) as refused_config:
        load_config(str(moved))
    assert str(refused_config.value) == said
    with pytest.raises(ModelError, match="does not fit its base model: .* for the base"):
        merged(
            load_model(str(gemma), device="cpu")[0], moved
        )  # the load's own refusal, past the header check


def test_a_model_path_no_file_can_have_is_a_model_error_wherever_it_is_named(llama_adapter, tmp_path, capsys):
    """A 300-character name made `Path.is_file` raise inside `resolve_model`: the library, the dashboard's
    picker, `models --prepare` and an adapter's base all say it in one line."""
    from skipcore.errors import ModelError
    from skipcore.models.reference import resolve_model

    long = str(tmp_path / ("a" * 300))
    with pytest.raises(ModelError, match="is 300 bytes long"):
        resolve_model(long)
    assert "is 300 bytes long" in refused(capsys, ["models", "--prepare", long])
    based = llama_adapter("based", base_model_name_or_path=long)
    with pytest.raises(ModelError, match="is 300 bytes long"):
        resolve_model(str(based))


def test_an_adapter_whose_base_is_a_hub_name_that_cannot_be_read_names_the_adapter(
    llama_adapter, capsys, monkeypatch
):
    """A base named as a short name not installed or a hub id, offline, was refused without a word of the adapter
    (its name alone, not the path typed): said as the adapter's base, as a base folder that is gone is."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    named = llama_adapter("hub-base", base_model_name_or_path="no-such-org/no-such-model")
    said = generate_refused(capsys, "--model", str(named), "--prompt", "MR: x")
    assert said.startswith(
        f"--model: {named} is a LoRA adapter whose base cannot be used: 'no-such-org/no-such-model' is no model "
        "folder, .gguf file or installed model"
    ), said
    assert "HF_HUB_OFFLINE is set" in said


def test_an_adapter_whose_base_is_a_relative_path_that_does_not_lead_anywhere_says_so(tmp_path, monkeypatch):
    """Adapters saved with a relative base load only from the folder they were trained in: elsewhere the message
    says that, not "model directory not found"."""
    import torch
    from safetensors.torch import save_file

    from skipcore.errors import ModelError
    from skipcore.models.reference import resolve_model

    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "./runs/base"}))
    save_file({"x": torch.zeros(1)}, str(adapter / "adapter_model.safetensors"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ModelError, match="its base ./runs/base is a relative path"):
        resolve_model(str(adapter))


def test_a_real_models_short_name_mistyped_is_said_before_any_hub_request(monkeypatch):
    """'smollm2-135M' (the model card's spelling) went to the hub: on an offline machine a minute of retries, then
    a refusal. It is the short name mistyped, said at once; a hub id with its owner, or one far from every short
    name, is still a hub id."""
    from skipcore.errors import ModelError
    from skipcore.models.reference import resolve_model

    monkeypatch.chdir("/")  # no folder of these names here
    for typed, meant in (("smollm2-135M", "smollm2-135m"), ("Gemma-3-270M", "gemma-3-270m")):
        with pytest.raises(ModelError, match=f"^no model named '{typed}'; did you mean '{meant}'"):
            resolve_model(typed)
    assert resolve_model("HuggingFaceTB/SmolLM2-135M").kind == "hub"
    assert resolve_model("gpt2").kind == "hub"


def test_an_adapter_whose_base_is_gone_names_the_adapter(llama_adapter, tmp_path, capsys):
    """'model directory not found: /x/base' did not say that /x/base is the base of the adapter named by --model."""
    gone = llama_adapter("orphan", base_model_name_or_path=str(tmp_path / "base-gone"))
    said = generate_refused(capsys, "--model", str(gone), "--prompt", "MR: x")
    assert said == (
        f"--model: {gone} is a LoRA adapter whose base cannot be used: model directory not found: "
        f"{tmp_path / 'base-gone'}"
    )


def test_a_model_with_code_of_its_own_says_the_code_did_not_run(model_dirs, tmp_path):
    """A config naming its own classes (`auto_map`) loads as the built-in class of its model type without
    --trust-remote-code (its code never runs): said, where it was silent."""
    from skipcore.errors import SkipcoreWarning

    model = tmp_path / "custom"
    shutil.copytree(model_dirs["opt"], model)
    config = json.loads((model / "config.json").read_text())
    config["auto_map"] = {"AutoModelForCausalLM": "modeling_x.XForCausalLM"}
    (model / "config.json").write_text(json.dumps(config))
    with pytest.warns(SkipcoreWarning, match="names code of its own .* runs as transformers' built-in opt"):
        load_model(str(model), device="cpu", dtype="float32")


def test_a_cuda_device_this_machine_lacks_is_named_as_asked(monkeypatch):
    """From Python the refusal names the device as it was given (`cuda:1`), not the command line's flag."""
    import torch

    from skipcore.models.loading import resolve_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(UserError, match=r"^device 'cuda:1' was asked for, but no CUDA device is available$"):
        resolve_device("cuda:1")


def test_a_model_type_of_its_own_code_is_refused_as_a_family_without_running_the_code(
    model_dirs, tmp_path, capsys
):
    """A config whose model type only its own code knows (`auto_map` to a config class) was refused in transformers'
    first sentence ('contains custom code which must be executed'), naming no flag and no family; the code never
    runs, and with it allowed the family would be refused anyway: said as the unsupported family it is."""
    model = tmp_path / "mine"
    shutil.copytree(model_dirs["llama"], model)
    config = json.loads((model / "config.json").read_text())
    config["model_type"] = "mine"
    config["auto_map"] = {"AutoConfig": "configuration_mine.MineConfig"}
    (model / "config.json").write_text(json.dumps(config))
    ran = tmp_path / "the folder's code ran"
    (model / "configuration_mine.py").write_text(f"open({str(ran)!r}, 'w').close()\n")
    said = generate_refused(capsys, "--model", str(model), "--prompt", "MR: x")
    assert said == f"{model}: unsupported architecture 'mine'; supported model types: {', '.join(SUPPORTED)}"
    assert not ran.exists()
