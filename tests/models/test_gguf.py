"""GGUF files and their cached safetensors copies, on tiny GGUF files written here with the `gguf` package: a
file broken anywhere (its header, its tokenizer, its tensors) is one line naming it; an architecture skipcore
does not run is refused from the header before anything is converted; a damaged copy is never called ready nor
loaded, and `models --prepare` rebuilds it; an edited file replaces its own copy; a killed conversion's
staging folder goes; cache folders get the modes any new folder gets; a folder's `Model.GGUF` is found as a
file's is."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from skipcore import load_model
from skipcore.commands import main
from skipcore.errors import ModelError
from skipcore.models import gguf
from skipcore.models.catalog import REAL_MODELS, RealModel
from skipcore.models.loading import load_config
from skipcore.models.model_cache import MARKER, REPLACED, cache_status, cached_folder_for_model
from skipcore.models.reference import resolve_model

gguf_writer = pytest.importorskip("gguf", reason="reading GGUF files needs the gguf package")

TOKENS = ["<s>", "</s>", "a", "b", "ab", "c", "d", "cd"]
MERGES = ("a b", "c d")


def write_gguf(
    path: Path,
    arch: str = "llama",
    merges=MERGES,
    tokens=TOKENS,
    seed: int = 0,
    *,
    declared_layers: int = 2,
    tokenizer_model: str | None = "gpt2",
    q_rows: int = 16,
) -> Path:
    """A two-layer Llama-family GGUF file of float32 tensors with a BPE tokenizer: a few kB, converted in a
    fraction of a second. `declared_layers`, `tokenizer_model` (None: the key left out) and `q_rows` (layer 1's
    query rows) write files whose header and tensors disagree."""
    w = gguf_writer.GGUFWriter(str(path), arch)
    w.add_name("tiny")
    w.add_block_count(declared_layers)
    w.add_context_length(64)
    w.add_embedding_length(16)
    w.add_feed_forward_length(32)
    w.add_head_count(2)
    w.add_head_count_kv(2)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(8)
    if tokenizer_model is not None:
        w.add_tokenizer_model(tokenizer_model)
    w.add_tokenizer_pre("default")
    w.add_token_list(list(tokens))
    w.add_token_types([1] * len(tokens))
    if merges is not None:
        w.add_token_merges(list(merges))
    w.add_bos_token_id(0)
    w.add_eos_token_id(1)
    rng = np.random.default_rng(seed)

    def weights(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    hidden, ffn = 16, 32
    w.add_tensor("token_embd.weight", weights(len(tokens), hidden))
    for i in range(2):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(hidden, np.float32))
        for name in ("q", "k", "v", "output"):
            rows = q_rows if (name, i) == ("q", 1) else hidden
            w.add_tensor(f"blk.{i}.attn_{name}.weight", weights(rows, hidden))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(hidden, np.float32))
        w.add_tensor(f"blk.{i}.ffn_gate.weight", weights(ffn, hidden))
        w.add_tensor(f"blk.{i}.ffn_up.weight", weights(ffn, hidden))
        w.add_tensor(f"blk.{i}.ffn_down.weight", weights(hidden, ffn))
    w.add_tensor("output_norm.weight", np.ones(hidden, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """An empty cache of this test's own."""
    root = tmp_path / "cache"
    monkeypatch.setenv("SKIPCORE_CACHE", str(root))
    return root / "models"


def failed(capsys, argv: list[str]) -> str:
    """Run the command line, refused: exit code 2, no traceback, nothing on stdout, and one `error:` line last
    (after at most the line saying a conversion started); that line, less `error: `."""
    capsys.readouterr()
    assert main(argv) == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert out == "" and "Traceback" not in err and lines[-1].startswith("error: "), err
    assert len(lines) == 1 or (len(lines) == 2 and lines[0].startswith("converting ")), err
    return lines[-1].removeprefix("error: ")


def generate_argv(model: str | Path) -> list[str]:
    return ["generate", "--model", str(model), "--prompt", "ab", "--max-new-tokens", "2", "--device", "cpu"]


# -- a file broken anywhere ----------------------------------------------------------------------------------
def cut(path: Path, keep: int) -> Path:
    """The first `keep` bytes of `path` (`head -c`), beside it."""
    out = path.with_name(f"cut{keep}.gguf")
    out.write_bytes(path.read_bytes()[:keep])
    return out


@pytest.mark.parametrize("keep", [10, 200, 1000, -200])
def test_a_gguf_file_cut_short_is_one_line_naming_it(tmp_path, cache, capsys, keep):
    """Cut in its magic, its fields, its tensor table or its tensors (`head -c N`)."""
    whole = write_gguf(tmp_path / "whole.gguf")
    broken = cut(whole, keep if keep > 0 else whole.stat().st_size + keep)
    said = failed(capsys, generate_argv(broken))
    assert str(broken) in said and ("damaged" in said or "could not" in said), said
    with pytest.raises(ModelError, match="could not"):
        load_model(str(broken), device="cpu")
    assert not cache.exists() or not any(cache.iterdir())  # nothing half-made left in the cache


def test_a_gguf_header_of_garbage_lengths_is_one_line(tmp_path):
    """Lengths no file could hold (a damaged header's garbage) end the read at once, without asking for
    memory."""
    whole = write_gguf(tmp_path / "whole.gguf").read_bytes()
    # the tensor count, the field count, the first key's length, the first value's length
    for offset in (8, 16, 24, 56):
        blob = bytearray(whole)
        blob[offset : offset + 8] = b"\xff" * 8
        broken = tmp_path / f"garbage{offset}.gguf"
        broken.write_bytes(bytes(blob))
        with pytest.raises(ModelError, match=f"could not read model '{broken}': its GGUF header is damaged"):
            load_config(str(broken))


@pytest.mark.parametrize(
    "merges, tokens",
    [
        (("a b", "ab", "c d"), TOKENS),  # a one-entry merge: the tokenizer's TypeError
        (("a b", "c x"), TOKENS),  # a merge of a piece the vocabulary lacks
        (("a b", "c b"), TOKENS),  # a merge whose result the vocabulary lacks
        (("a b",), TOKENS),  # one merge in all
    ],
)
def test_a_gguf_tokenizer_that_cannot_be_built_is_one_line_naming_the_file(
    tmp_path, cache, capsys, merges, tokens
):
    path = write_gguf(tmp_path / "tok.gguf", merges=merges, tokens=tokens)
    said = failed(capsys, generate_argv(path))
    assert said.startswith(f"could not convert {path}: "), said
    assert not any(cache.iterdir())


def test_a_readers_panic_is_one_line_and_ctrl_c_stays_ctrl_c(tmp_path, cache, monkeypatch):
    """The tokenizers library panics (a BaseException) on some files: said as any failure; an interrupt is
    not."""

    class PanicException(BaseException):  # what pyo3 raises, by name
        pass

    path = write_gguf(tmp_path / "m.gguf")
    for raised, caught in ((PanicException("index out of bounds"), ModelError), (KeyboardInterrupt(), None)):

        def reader(*args, raised=raised):
            raise raised

        monkeypatch.setattr(gguf, "_dequantized", reader)
        with pytest.raises(caught or KeyboardInterrupt) as e:
            resolve_model(str(path)).convert(lambda _: None)
        if caught:
            assert str(e.value) == f"could not convert {path}: index out of bounds " + (
                "(the file is damaged, or not a model transformers reads)"
            )
    assert not any(cache.iterdir())


def test_an_unsupported_architecture_is_refused_from_the_header_before_any_conversion(
    tmp_path, cache, monkeypatch, capsys
):
    path = write_gguf(tmp_path / "phi.gguf", arch="phi2")
    monkeypatch.setattr(gguf, "_dequantized", lambda *a: pytest.fail("converted before it was refused"))
    for attempt in (lambda: resolve_model(str(path)).convert(), lambda: load_config(str(path))):
        with pytest.raises(ModelError, match=f"{path}: unsupported architecture 'phi2'"):
            attempt()
    assert "unsupported architecture 'phi2'" in failed(capsys, generate_argv(path))
    assert not cache.exists() or not any(cache.iterdir())


def refused_with_nothing_cached(capsys, cache: Path, path: Path) -> str:
    """`models --prepare` and `generate` on `path`: both refused (exit 2, no traceback), the cache holding no
    copy; the refusal, less `error: `. A refusal from the header alone is the only line: no conversion was said
    to start."""
    said = []
    for argv in (["models", "--prepare", str(path)], generate_argv(path)):
        capsys.readouterr()
        assert main(argv) == 2
        out, err = capsys.readouterr()
        assert out == "" and "Traceback" not in err, err
        lines = err.strip().splitlines()
        said.append(lines[-1].removeprefix("error: "))
        assert "its tensors do not fit" in lines[-1] or len(lines) == 1, err  # dequantized first
        assert not cache.exists() or not any(cache.iterdir()), list(cache.iterdir())
    return said[-1]


@pytest.mark.parametrize("declared", [1, 3])
def test_a_file_declaring_other_layers_than_its_tensors_hold_is_refused_not_made_half_random(
    tmp_path, cache, capsys, declared
):
    """A block count above the tensors' layers made a model whose extra layers transformers initialised at
    random, one below them dropped the last layer's tensors: both ran, converted and cached, without a word."""
    path = write_gguf(tmp_path / "m.gguf", declared_layers=declared)
    said = refused_with_nothing_cached(capsys, cache, path)
    assert said == (
        f"{path}: its header declares {declared} layer{'s' * (declared != 1)} (llama.block_count), and its tensors "
        "are those of layers 0-1: the file is damaged, or was written wrong"
    )


def test_a_tensor_of_another_shape_than_the_header_gives_is_refused_before_its_copy_is_cached(
    tmp_path, cache, capsys
):
    """transformers' GGUF reader set a query matrix of 8 rows where the header's width makes 16: the conversion
    cached it, and only the load of the copy refused it, naming the cache's own config.json."""
    path = write_gguf(tmp_path / "m.gguf", q_rows=8)
    said = refused_with_nothing_cached(capsys, cache, path)
    assert said == (
        f"{path}: its tensors do not fit the model its header declares: 1 tensor of other shapes in the weights "
        "than its header gives them, e.g. model.layers.1.self_attn.q_proj.weight: [8, 16] in the weights, [16, 16] "
        "by its header"
    )


def test_a_vocabulary_without_its_tokenizers_kind_is_refused_not_read_as_sentencepiece(
    tmp_path, cache, capsys
):
    """Without tokenizer.ggml.model transformers built a SentencePiece tokenizer of a BPE vocabulary: every space
    an unknown token, the text generated garbled, and the run exited 0. A BPE vocabulary without its merges was
    refused in transformers' words, 'tokens and scores need to be passed for a LLaMa tokenizer'."""
    path = write_gguf(tmp_path / "m.gguf", tokenizer_model=None)
    said = refused_with_nothing_cached(capsys, cache, path)
    assert said.startswith(f"{path}: its header has a vocabulary but does not name its tokenizer's kind"), (
        said
    )
    for merges in ((), None):  # none in it, or no such key
        path = write_gguf(tmp_path / f"no_merges_{merges is None}.gguf", merges=merges)
        said = refused_with_nothing_cached(capsys, cache, path)
        assert said == f"{path}: its header's gpt2 (BPE) tokenizer has no merges (tokenizer.ggml.merges)"


def test_a_folder_holding_one_gguf_file_finds_it_whatever_the_case_of_its_suffix(tmp_path, cache, capsys):
    folder = tmp_path / "model"
    folder.mkdir()
    write_gguf(folder / "Model.GGUF")
    ref = resolve_model(str(folder))
    assert (ref.kind, ref.path) == ("gguf", folder / "Model.GGUF")
    assert load_config(ref).num_hidden_layers == 2
    assert main(generate_argv(folder)) == 0
    write_gguf(folder / "other.gguf")
    with pytest.raises(ModelError, match="holds 2 GGUF files"):
        resolve_model(str(folder))


# -- the cached copy -----------------------------------------------------------------------------------------
def truncate(folder: Path, name: str = "model.safetensors") -> None:
    weights = folder / name
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])


def test_a_conversion_reads_its_file_once_and_gives_the_package_back_as_it_was(tmp_path, cache, monkeypatch):
    """transformers made a reader of the file each time it read it (tokenizer, config, weights: four times) and a
    name map per tensor; each reader parses every field, half of a real model's conversion. One reader and one
    map serve a conversion now, the weights and tokenizer those of a conversion without them, and the package's
    own functions are back afterwards."""
    made, real = [], gguf_writer.GGUFReader

    def counted(path, mode="r"):
        made.append(Path(path).name)
        return real(path, mode)

    monkeypatch.setattr(gguf_writer, "GGUFReader", counted)
    name_map = gguf_writer.get_tensor_name_map
    path = write_gguf(tmp_path / "m.gguf")
    once = resolve_model(str(path)).convert(lambda _: None)
    assert made == ["m.gguf"]
    assert gguf_writer.GGUFReader is counted and gguf_writer.get_tensor_name_map is name_map
    # the same conversion with the package's functions made to bypass the one reader: the same files
    monkeypatch.setattr(gguf, "_one_reader_per_file", contextlib.nullcontext)
    plain = tmp_path / "plain"
    plain.mkdir()
    gguf.convert(path, plain)
    assert len(made) > 2
    for f in ("model.safetensors", "tokenizer.json", "config.json"):
        assert (once / f).read_bytes() == (plain / f).read_bytes(), f


def test_a_damaged_copy_of_a_gguf_file_is_refused_with_the_command_that_rebuilds_it(tmp_path, cache, capsys):
    path = write_gguf(tmp_path / "m.gguf")
    folder = resolve_model(str(path)).convert(lambda _: None)
    truncate(folder)
    ref = resolve_model(str(path))
    assert ref.needs_conversion and ref.cache_status.state == "damaged"
    assert load_config(ref).num_hidden_layers == 2  # read from the header, not the damaged copy
    said = failed(capsys, generate_argv(path))
    assert said.startswith(f"the cached copy of {path} in {folder} is damaged (model.safetensors holds ")
    assert said.endswith(f"rebuild it with: skipcore models --prepare {path}"), said
    assert main(["models", "--prepare", str(path)]) == 0
    assert cache_status(folder, path).ready and sorted(p.name for p in cache.iterdir()) == [folder.name]
    assert not (folder / REPLACED).exists()
    assert main(generate_argv(path)) == 0


@pytest.mark.parametrize(
    "damage",
    [
        lambda folder: truncate(folder),
        lambda folder: truncate(folder, "tokenizer.json"),
        lambda folder: (folder / "config.json").unlink(),
        lambda folder: (folder / MARKER).write_text("{"),
        lambda folder: edit_keeping_size(folder / "config.json"),  # its size alone said nothing of this
    ],
)
def test_a_copy_is_ready_only_when_its_files_are_those_its_conversion_recorded(tmp_path, cache, damage):
    path = write_gguf(tmp_path / "m.gguf")
    folder = gguf.file_folder(path, lambda _: None)
    assert cache_status(folder, path).ready
    damage(folder)
    assert cache_status(folder, path).state == "damaged"
    with pytest.raises(ModelError, match="is damaged"):
        gguf.file_folder(path, lambda _: None)
    assert gguf.file_folder(path, lambda _: None, rebuild=True) == folder and cache_status(folder, path).ready


def edit_keeping_size(path: Path) -> None:
    """A digit of the file changed for another, its size as it was (a hand edit of `rope_theta`'s value)."""
    text = path.read_text()
    at = next(i for i, c in enumerate(text) if c in "12345678")
    path.write_text(text[:at] + str(int(text[at]) + 1) + text[at + 1 :])


def test_an_edited_config_of_a_copy_is_said_as_edited(tmp_path, cache):
    path = write_gguf(tmp_path / "m.gguf")
    folder = gguf.file_folder(path, lambda _: None)
    edit_keeping_size(folder / "config.json")
    status = cache_status(folder, path)
    assert status.state == "damaged" and "config.json was edited since it was converted" in status.why


def test_a_copy_made_before_files_were_recorded_is_checked_by_its_weights_headers(tmp_path, cache):
    path = write_gguf(tmp_path / "m.gguf")
    folder = gguf.file_folder(path, lambda _: None)
    record = json.loads((folder / MARKER).read_text())
    del record["files"]
    (folder / MARKER).write_text(json.dumps(record))
    assert cache_status(folder, path).ready
    truncate(folder)
    status = cache_status(folder, path)
    assert status.state == "damaged" and "its header describes" in status.why


def test_an_edited_gguf_file_replaces_its_own_copy(tmp_path, cache):
    path = write_gguf(tmp_path / "m.gguf")
    folder = gguf.file_folder(path, lambda _: None)
    first = json.loads((folder / MARKER).read_text())["source"]
    said = []
    write_gguf(path, seed=1)
    os.utime(path, ns=(first["mtime_ns"] + 10**9, first["mtime_ns"] + 10**9))
    assert resolve_model(str(path)).cache_status.state == "stale"
    assert gguf.file_folder(path, said.append) == folder
    assert "has changed since it was converted" in said[0]
    assert json.loads((folder / MARKER).read_text())["source"]["mtime_ns"] == first["mtime_ns"] + 10**9
    assert sorted(p.name for p in cache.iterdir()) == [folder.name]  # the old copy replaced, not kept beside


def test_cache_folders_and_files_get_the_modes_any_new_ones_get(tmp_path, cache):
    path = write_gguf(tmp_path / "m.gguf")
    folder = gguf.file_folder(path, lambda _: None)
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "f").write_text("x")
    assert stat.S_IMODE(folder.stat().st_mode) == stat.S_IMODE(probe.stat().st_mode)
    for f in folder.iterdir():
        assert stat.S_IMODE(f.stat().st_mode) == stat.S_IMODE((probe / "f").stat().st_mode), f.name


HOLD_STAGING = """
import os, signal, sys
from pathlib import Path
from skipcore.models.model_cache import staging_folder
with staging_folder(Path(sys.argv[1])) as staging:
    print(staging, flush=True)
    if sys.argv[2] == "killed":
        os.kill(os.getpid(), signal.SIGKILL)
    sys.stdin.read()
"""


def test_a_killed_conversions_staging_folder_is_removed_and_a_live_ones_is_not(tmp_path, cache):
    """A conversion killed part way (`kill -9` of `models --prepare`) leaves its staging folder: the next
    conversion in the cache removes it, and leaves alone one whose conversion still runs and a folder it did
    not make."""

    def holder(how: str) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-c", HOLD_STAGING, str(cache / "x-0"), how],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    killed, live = holder("killed"), holder("live")
    try:
        dead_folder, live_folder = (
            Path(killed.stdout.readline().strip()),
            Path(live.stdout.readline().strip()),
        )
        assert killed.wait(timeout=60) == -signal.SIGKILL and dead_folder.is_dir() and live_folder.is_dir()
        foreign = cache / ".notes.partial"
        foreign.mkdir()
        path = write_gguf(tmp_path / "m.gguf")
        gguf.file_folder(path, lambda _: None)
        assert not dead_folder.exists() and live_folder.is_dir() and foreign.is_dir()
    finally:
        live.communicate("", timeout=60)
    assert not live_folder.exists()  # its own process removed it on the way out


# -- an installed real model, in a package of its own --------------------------------------------------------
@pytest.fixture
def tiny_real(tmp_path, cache, monkeypatch) -> RealModel:
    """A real model whose package is installed (a folder on sys.path holding its GGUF file), by short name."""
    package = tmp_path / "site" / "tiny_real_gguf"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    write_gguf(package / "tiny.gguf")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    model = RealModel(
        name="tiny-real",
        title="Tiny",
        package="tiny-real-gguf",
        version="1.0",
        module="tiny_real_gguf",
        gguf="tiny.gguf",
        family="llama",
        licence="MIT",
        quantization="F32",
        install="pip install tiny-real-gguf==1.0",
        parameters="10k",
    )
    monkeypatch.setitem(REAL_MODELS, model.name, model)
    return model


def listed(capsys, name: str) -> str:
    capsys.readouterr()
    assert main(["models"]) == 0
    return next(line for line in capsys.readouterr().out.splitlines() if line.startswith(name + " "))


def test_a_damaged_real_model_copy_is_listed_as_damaged_refused_and_rebuilt_by_prepare(
    tiny_real, cache, capsys, monkeypatch
):
    folder = gguf.model_folder(tiny_real, lambda _: None)
    assert "converted" in listed(capsys, "tiny-real")
    truncate(folder)
    with monkeypatch.context() as m:  # listing reads the header, never the damaged copy, and converts nothing
        m.setattr(gguf, "ensure_converted", lambda *a, **k: pytest.fail("converted while listing"))
        row = listed(capsys, "tiny-real")
    assert "2 x 16" in row and "its cached copy is damaged: skipcore models --prepare tiny-real" in row, row
    said = failed(capsys, generate_argv("tiny-real"))
    assert said.startswith(f"the cached copy of tiny-real in {folder} is damaged (model.safetensors holds ")
    assert said.endswith("rebuild it with: skipcore models --prepare tiny-real")
    assert main(["models", "--prepare", "tiny-real"]) == 0
    assert cache_status(folder).ready and ", converted" in listed(capsys, "tiny-real")
    assert main(generate_argv("tiny-real")) == 0


def test_a_real_models_cache_folder_holding_anothers_files_is_listed_from_the_header_and_left_alone(
    tiny_real, cache, capsys
):
    """A partial copy (a folder with no record of skipcore's: copied by hand, cut short) is not read as the
    model nor replaced; listing reads the header."""
    target = cached_folder_for_model(tiny_real)
    target.mkdir(parents=True)
    (target / "config.json").write_text("{")
    row = listed(capsys, "tiny-real")
    assert "2 x 16" in row and "holds files skipcore did not write" in row, row
    assert "not a complete skipcore model cache" in failed(capsys, ["models", "--prepare", "tiny-real"])
    assert (target / "config.json").read_text() == "{"


def test_prepare_takes_real_models_and_gguf_files_only(tiny_real, cache, model_dirs, capsys):
    said = failed(capsys, ["models", "--prepare", "tiny-real", str(model_dirs["opt"])])
    assert said.startswith(f"--prepare {model_dirs['opt']}: not a real model or a GGUF file"), said
    assert not cache.exists()  # nothing converted before the refusal


@pytest.mark.parametrize("name", ["{tmp}/x/nonexist.gguf", "{tmp}/x/NONEXIST.GGUF", "nonexist.gguf"])
def test_a_gguf_file_that_is_not_there_is_said_as_a_file_not_found(tmp_path, cache, capsys, name):
    """`models --prepare /x/nonexist.gguf` said 'model directory not found' of a file's path (and a bare name ending
    .gguf, 'not a real model or a GGUF file'); a .gguf name is a file's, so the file is what is not found."""
    name = name.format(tmp=tmp_path)
    assert failed(capsys, ["models", "--prepare", name]) == f"--prepare: model file not found: {name}"
    # a bare or relative .gguf name was taken as a hub id by generate: looked up there, or said as not on it
    assert failed(capsys, generate_argv(name)) == f"--model: model file not found: {name}"
    assert (
        failed(capsys, generate_argv("sub/nonexist.gguf"))
        == "--model: model file not found: sub/nonexist.gguf"
    )
    assert failed(capsys, ["models", "--prepare", str(tmp_path / "gone")]).startswith(
        "--prepare: model directory not found: "
    )
    assert not cache.exists()


def test_a_cache_folder_that_cannot_be_made_says_the_way_on(tmp_path, monkeypatch):
    """Where SKIPCORE_CACHE is the folder at fault, the way on is another folder for it (it said 'set
    SKIPCORE_CACHE', which was set)."""
    from skipcore.errors import ModelError
    from skipcore.models.model_cache import staging_folder

    blocked = tmp_path / "a_file"
    blocked.write_text("mine")
    for env, said in ((str(blocked), "set SKIPCORE_CACHE to another folder"), (None, "; set SKIPCORE_CACHE")):
        if env is None:
            monkeypatch.delenv("SKIPCORE_CACHE", raising=False)
        else:
            monkeypatch.setenv("SKIPCORE_CACHE", env)
        with pytest.raises(ModelError, match=f"cannot write the model cache {blocked}/models: .*{said}$"):
            staging_folder(blocked / "models" / "m").__enter__()
    assert blocked.read_text() == "mine"


def test_without_the_gguf_package_a_conversion_is_refused_before_it_starts(
    tiny_real, cache, capsys, monkeypatch
):
    """Without gguf, `models --prepare` said it was converting, transformers said the package was missing, and the
    error said it again (three lines); `models` listed the model as converted on first use, which could not run."""
    import importlib.metadata

    found = importlib.metadata.version

    def version(name: str) -> str:
        if name == "gguf":
            raise importlib.metadata.PackageNotFoundError(name)
        return found(name)

    monkeypatch.setattr(importlib.metadata, "version", version)
    assert "(converting it needs the gguf package (0.10 or newer): pip install 'gguf>=0.10')" in listed(
        capsys, "tiny-real"
    )
    capsys.readouterr()
    assert main(["models", "--prepare", "tiny-real"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "to safetensors needs the gguf package" in lines[0], lines
    assert not cached_folder_for_model(tiny_real).exists()
    monkeypatch.setattr(importlib.metadata, "version", found)
    truncate(gguf.model_folder(tiny_real, lambda _: None))  # a damaged copy stays said as damaged
    monkeypatch.setattr(importlib.metadata, "version", version)
    row = listed(capsys, "tiny-real")
    assert "its cached copy is damaged" in row and "; converting it needs the gguf package" in row, row


def test_conversions_at_once_in_threads_leave_the_gguf_package_as_it_was():
    """Two at once (the dashboard's sessions are threads) put the package's functions back out of order: one
    conversion's reader stayed in place, and its kept readers served a file replaced since with its old weights."""
    import threading
    import time

    import gguf as package

    real = (package.GGUFReader, package.get_tensor_name_map)
    tried = threading.Event()

    def first():
        with gguf._one_reader_per_file():
            tried.wait(5)
            time.sleep(0.3)  # the second is inside by now, or waits for this one

    def second():
        tried.set()
        with gguf._one_reader_per_file():
            time.sleep(0.5)  # out after the first

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    threads[0].start()
    time.sleep(0.1)
    threads[1].start()
    for t in threads:
        t.join(10)
    assert (package.GGUFReader, package.get_tensor_name_map) == real


def test_loads_at_once_in_threads_leave_transformers_logging_and_the_warning_filters_as_they_were():
    """Two overlapping loads left transformers' verbosity at errors only and an ignore filter behind."""
    import threading
    import time
    import warnings

    from transformers.utils import logging as hf_logging

    from skipcore.models import loading

    before, filters = hf_logging.get_verbosity(), list(warnings.filters)
    inside = threading.Event()

    def load(hold: float):
        with loading._quiet_transformers():
            inside.set()
            time.sleep(hold)

    threads = [threading.Thread(target=load, args=(0.3,)), threading.Thread(target=load, args=(0.6,))]
    threads[0].start()
    inside.wait(5)
    threads[1].start()
    for t in threads:
        t.join(10)
    assert hf_logging.get_verbosity() == before and list(warnings.filters) == filters


@pytest.mark.parametrize(
    ("held", "said"),
    [((), "no layer"), ((0,), "layer 0"), ((0, 2), "layers 0, 2"), ((0, 1, 2), "layers 0-2")],
)
def test_the_layers_a_header_holds_are_said_however_few(held, said):
    """A header of no layer tensors at all raised an IndexError in the check that says which it holds."""
    from skipcore.models.gguf_header import GgufHeader

    header = GgufHeader(
        {"general.architecture": "llama", "llama.block_count": 4}, tuple(f"blk.{i}.x" for i in held)
    )
    with pytest.raises(ModelError, match=f"its tensors are those of {said}:"):
        gguf._check_header(header, "f.gguf")
