"""What several test packages share that is not a fixture: the tiny models' families and prompts, engines on
them, the command line's argv builders and its one-line refusal, a sweep's tiny configs, and the dashboard's
AppTest helpers. Fixtures live in the `conftest.py` files; no test module imports another."""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from skipcore.decode.sampling import Sampling, TokenPicker

REPO = Path(__file__).resolve().parents[1]
APP = REPO / "app" / "streamlit_app.py"
FAMILIES = ["opt", "opt-proj", "gpt2", "llama", "mistral", "qwen2", "qwen3", "gemma3"]
PROMPTS = [
    "The Eagle is a cheap",
    "Green Man serves Italian food near the city centre and is family friendly",
    "Skipping",
]


# -- engines on the tiny models ------------------------------------------------------------------------------
def engine_for(
    model_dirs,
    family: str = "opt",
    attn: str = "eager",
    static: bool | None = None,
    device="cpu",
    dtype: str = "float32",
):
    """An engine on a tiny model, float32 and eager attention (the reference kernel) unless asked."""
    from skipcore.decode.engine import SkipEngine
    from skipcore.models.loading import load_model

    model, tok = load_model(str(model_dirs[family]), device=device, dtype=dtype, attn_implementation=attn)
    return SkipEngine(model, tok, static=static)


def hf_generate(engine, prompts, max_new_tokens, **kw):
    """transformers' own generate() on the engine's model: the new tokens only."""
    enc = engine.tokenizer(prompts, return_tensors="pt", padding=True).to(engine.device)
    with torch.no_grad():
        out = engine.model.generate(**enc, max_new_tokens=max_new_tokens, **kw)
    return out[:, enc["input_ids"].shape[1] :].cpu()


def padded(token_ids, pad, width):
    return torch.tensor([ids + [pad] * (width - len(ids)) for ids in token_ids])


class RecordingPicker(TokenPicker):
    """Greedy picking that keeps every step's logits, to compare them with a recomputation."""

    def __init__(self):
        super().__init__(Sampling(), torch.device("cpu"))
        self.logits = []

    def __call__(self, logits):
        self.logits.append(logits.clone())
        return super().__call__(logits)


def full_depth_logits(engine, prompt: str, generated: list[int]) -> torch.Tensor:
    """Uncached full-depth logits after each generated token's prefix: (len(generated), V)."""
    ids = engine.tokenizer([prompt], return_tensors="pt")["input_ids"]
    seq = torch.cat([ids, torch.tensor([generated])], 1)
    with torch.no_grad():
        logits = engine.model(seq).logits[0]
    return logits[ids.shape[1] - 1 : ids.shape[1] - 1 + len(generated)]


def differing_rows(engine, prompts, got, want, tie: float = 1e-4) -> int:
    """Rows whose tokens differ; each must differ first where full depth's top two logits (nearly) tie."""
    bad = 0
    for prompt, a, b in zip(prompts, got, want, strict=True):
        if a == b:
            continue
        i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        top = full_depth_logits(engine, prompt, b[: i + 1])[i].topk(2).values
        assert float(top[0] - top[1]) < tie, f"not a near-tie at token {i}: {top.tolist()}"
        bad += 1
    return bad


def as_trained_model(
    src: Path,
    dst: Path,
    max_new_tokens: int,
    decay_span: int,
    median_target: int,
    objective: str | None = None,
) -> Path:
    """A copy of a tiny model that says, as a skipcore-trained one does, what it was trained for (and with which
    objective: "fixed" or "elastic" make it skip-aware)."""
    shutil.copytree(src, dst)
    settings = {
        "format": "skipcore-training/1",
        "generation": {"max_new_tokens": max_new_tokens, "decay_span": decay_span},
        "data": {"median_target_tokens": median_target},
        **({"objective": objective} if objective else {}),
    }
    (dst / "skipcore_training.json").write_text(json.dumps(settings))
    return dst


def descendants(pid: int) -> list[int]:
    """Every live process below `pid` (children, theirs, ...), from /proc; zombies are not counted."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        if fields[0] != "Z":
            parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        kids = parents.get(todo.pop(), [])
        out += kids
        todo += kids
    return out


# -- the command line ----------------------------------------------------------------------------------------
def train_argv(model_dir, out, *extra: str) -> list[str]:
    """`train` on a tiny model into `out`, with no progress bar and one thread (the machine's cores are shared)."""
    return ["train", "--no-progress", "--threads", "1", "--model", str(model_dir), "--out", str(out), *extra]


def resume_argv(checkpoint, out, *extra: str) -> list[str]:
    """`train --resume checkpoint` into `out`, with no progress bar and one thread."""
    return [
        "train",
        "--no-progress",
        "--threads",
        "1",
        "--resume",
        str(checkpoint),
        "--out",
        str(out),
        *extra,
    ]


def bench_argv(model: str, new_tokens: int, prompt_len: int, out) -> list[str]:
    """`bench` of one model at batch 1, one 2x target, one paired repeat and one thread, into `out`."""
    return [
        "bench", "--models", model, "--batch-sizes", "1", "--new-tokens", str(new_tokens),
        "--prompt-len", str(prompt_len), "--targets", "2", "--repeats", "1", "--threads", "1", "--out", str(out),
    ]  # fmt: skip


def refused(capsys, argv: list[str]) -> str:
    """Run the command line on `argv` and return its one line: a refusal is exit code 2, one `error: ...` line on
    stderr, no traceback (argparse's own errors included) and nothing on stdout (no part of the work done first)."""
    from skipcore.commands import main

    capsys.readouterr()  # what earlier steps printed is not this command's
    try:
        code = main(argv)
    except SystemExit as e:  # argparse's own one-line errors
        code = e.code
    out, err = capsys.readouterr()
    err = err.strip()
    assert code == 2, err
    assert err.startswith("error:") and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert out == "", out
    return err


def generate_refused(capsys, *argv: str) -> str:
    """`generate` on two prompts (the data set's, where `argv` gives none), refused in one line before anything is
    generated: the line, less `error: `."""
    given = {"--prompt", "--prompts-file"} & set(argv)
    two = [] if given else ["--limit", "2"]
    return refused(capsys, ["generate", *two, "--max-new-tokens", "8", *argv]).removeprefix("error: ")


# `train`'s flags for a run of one step: at its own rate, as a warmup (a share of the steps, rounded up) would take
# the only step and train it at rate 0, which `train` refuses
ONE_STEP = ("--steps", "1", "--warmup-ratio", "0")


def train_two_steps(model_dirs, out: Path, *extra: str) -> list[str]:
    """`train` argv for two steps of the tiny OPT model into `out`."""
    return train_argv(model_dirs["opt"], out, "--limit", "4", "--batch-size", "4", "--steps", "2", *extra)


CHAT_TEMPLATE = (
    "{% for m in messages %}<|user|>{{ m['content'] }}{% endfor %}<|bot|>"  # a user turn, then the bot's
)


def opened_on_instruct_model(model_dirs: dict, folder: Path, monkeypatch, page: str):
    """The app on `page`, its model the tiny OPT model with a chat template (an instruct model, as a user brings
    one), copied to `folder`."""
    from app.dashboard import paths

    monkeypatch.setenv(
        paths.MODEL_ENV, str(with_tokenizer(model_dirs["opt"], folder, chat_template=CHAT_TEMPLATE))
    )
    return open_app(page)


def with_tokenizer(model_dir: Path, folder: Path, **changes) -> Path:
    """A copy of the model folder `model_dir` at `folder` whose tokenizer has the attributes `changes` (a chat
    template, no EOS): a model as a user brings it."""
    import shutil

    from transformers import AutoTokenizer

    shutil.copytree(model_dir, folder)
    tok = AutoTokenizer.from_pretrained(folder)
    for name, value in changes.items():
        setattr(tok, name, value)
    tok.save_pretrained(folder)
    return folder


def write_csv(path: Path, sources: int) -> Path:
    """An E2E-style CSV of `sources` distinct meaning representations, one reference each."""
    rows = [
        {"mr": f"name[N{i}], food[F{i % 3}]", "ref": f"N{i} serves F{i % 3} food."} for i in range(sources)
    ]
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


# -- sweeps --------------------------------------------------------------------------------------------------
SOURCES = [
    ("name[The Eagle], eatType[pub]", ["The Eagle is a pub.", "The Eagle is a pub you can visit."]),
    ("name[Aromi], food[Italian]", ["Aromi serves Italian food."]),
    ("name[Green Man], area[riverside]", ["Green Man is in the riverside area."]),
]


def sweep_config(model_dirs, dataset, out, **kw):
    """A tiny sweep on the tiny OPT model: full depth and 2x in skip and exit mode, CALM at threshold 0, batch
    sizes 1 and 2, ten new tokens, two paired timing runs."""
    from skipcore.evaluate.sweep import SweepConfig

    base = dict(
        model=str(model_dirs["opt"]),
        dataset=str(dataset),
        out=out,
        split="test",
        limit=None,
        targets=(1.0, 2.0),
        modes=("skip", "exit"),
        batch_sizes=(1, 2),
        policies=("static", "calm"),
        policy_values={"calm_threshold": (0.0,)},
        max_new_tokens=10,
        device="cpu",
        dtype="float32",
        progress=False,
        repeats=2,
        timing_limit=None,
    )
    values = {**base.pop("policy_values"), **kw.pop("policy_values", {})}
    return SweepConfig(**{**base, **kw}, policy_values=values)


def speculative_config(model_dirs, dataset, out, **kw):
    """The tiny Llama model (transformers' early-exit assistant runs on that family only): full depth or skip
    schedules, speculative drafting with the 2x schedule at k = 2, and transformers' generate() plain and with
    an exit at layer 3."""
    base = dict(
        model=str(model_dirs["llama"]),
        modes=("skip",),
        policies=("static", "speculative", "transformers"),
        speculative_targets=(2.0,),
        policy_values={"draft_tokens": (2,), "assistant_exit": (3,)},
    )
    return sweep_config(model_dirs, dataset, out, **{**base, **kw})


# -- the dashboard (Streamlit's AppTest) ---------------------------------------------------------------------
APP_TIMEOUT = 120
MAX_NEW = 6  # short generations keep the app tests fast


def open_app(page: str | None = None):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(APP), default_timeout=APP_TIMEOUT).run()
    if page:
        at.switch_page(f"sections/{page}.py").run()
    return at


def assert_clean(at) -> None:
    """No traceback on the page, and no error box."""
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def by_key(widgets, key: str):
    return next(w for w in widgets if w.key == key)


def trade_offs_of(table: pd.DataFrame):
    """The Trade-offs page with `table` uploaded as a CSV sweep file."""
    at = open_app("tradeoffs")
    by_key(at.radio, "to_source").set_value("Upload a sweep file").run()
    upload = ("sweep.csv", table.to_csv(index=False).encode(), "text/csv")
    return by_key(at.get("file_uploader"), "to_upload").set_value(upload).run()


def texts_shown(at, index: int = 0) -> pd.DataFrame:
    """The `index`-th table of texts a page shows (`markdown.texts_table`, an HTML element), read back: its
    columns and each cell's text, as a browser shows it."""
    from html.parser import HTMLParser

    class Cells(HTMLParser):
        def __init__(self) -> None:
            super().__init__(convert_charrefs=True)
            self.rows: list[list[str]] = []
            self.cell: list[str] | None = None
            self.tags: set[str] = set()

        def handle_starttag(self, tag, attrs):
            self.tags.add(tag)
            if tag == "tr":
                self.rows.append([])
            elif tag in ("th", "td"):
                self.cell = []

        def handle_endtag(self, tag):
            if tag in ("th", "td"):
                self.rows[-1].append("".join(self.cell))
                self.cell = None

        def handle_data(self, data):
            if self.cell is not None:
                self.cell.append(data)

    tables = [e.value for e in at.get("html") if 'class="skipcore-texts"' in e.value]
    parsed = Cells()
    parsed.feed(tables[index])
    assert parsed.tags <= {"style", "div", "table", "thead", "tbody", "tr", "th", "td"}, (
        parsed.tags
    )  # text alone
    head, *rows = parsed.rows
    return pd.DataFrame(rows, columns=head)


def drawn_name(trace: dict) -> str:
    """A Plotly trace's name as a page's figure carries it, without the line breaks that fit it to a phone."""
    return trace["name"].replace("<br>", " ")


def plotly_array(value) -> np.ndarray:
    """A figure's array as its JSON holds it: a list, or plotly's typed array (base64 bytes, dtype, shape)."""
    if isinstance(value, dict):
        shape = [int(n) for n in str(value.get("shape", "-1")).split(",")]
        return np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"]).reshape(shape)
    return np.asarray(value)


def charts(at, kind: str = "plotly_chart") -> list:
    return at.get(kind)


def errors(at) -> str:
    assert not at.exception, [e.value for e in at.exception]
    return " | ".join(e.value for e in at.error)


def costs(at) -> pd.DataFrame:
    """The Compare page's costs table as numbers, one row per policy (the page shows it turned, in words)."""
    shown = at.dataframe[0].value.set_index("measure").T  # the first table (AppTest gives dataframes no key)

    def number(text: str) -> float:
        if text == "-":
            return float("nan")
        return float(text.rstrip("%x")) / (100 if text.endswith("%") else 1)

    return shown.map(number)


def sweep_frame() -> pd.DataFrame:
    """Rows shaped like `skipcore.evaluate`'s: full depth, two static modes, CALM, at two batch sizes."""
    rows = []
    for batch in (1, 8):
        rows.append(
            {
                "policy": "static",
                "mode": "full",
                "shape": "full",
                "target_speedup": 1.0,
                "speed": 1.0,
                "bleu": 45.0,
            }
        )
        for mode, quality in [("skip", 40.0), ("exit", 30.0)]:
            for i, speed in enumerate([2.0, 3.0]):
                rows.append(
                    {
                        "policy": "static",
                        "mode": mode,
                        "shape": "linear",
                        "target_speedup": speed,
                        "speed": speed,
                        "bleu": quality - 5 * i,
                    }
                )
        rows.append(
            {
                "policy": "calm",
                "mode": "calm",
                "shape": "full",
                "calm_threshold": 0.9,
                "speed": 1.5,
                "bleu": 41.0,
            }
        )
        for r in rows[-6:]:
            r.update(batch_size=batch, model_role="model", rougeL=r["bleu"] + 10, chrf=r["bleu"] + 20)
    df = pd.DataFrame(rows)
    df["layer_speedup"] = df.pop("speed")
    df["flops_speedup_decode"] = df["layer_speedup"] * 0.9
    df["wall_speedup_total"] = df["layer_speedup"] * 0.7
    df["wall_speedup_decode"] = df["layer_speedup"] * 0.8 * df["batch_size"] / 8
    return df


def adaptive_sweep_frame() -> pd.DataFrame:
    """`sweep_frame` plus two adaptive rows per batch size: one above the static front, one below it."""
    df = sweep_frame()
    rows = []
    for batch in (1, 8):
        for th, speed, bleu in [(0.3, 2.5, 42.0), (0.1, 2.2, 30.0)]:
            rows.append(
                {
                    "policy": "adaptive",
                    "mode": "skip",
                    "shape": "full",
                    "adaptive_threshold": th,
                    "adaptive_drop": 2,
                    "adaptive_min_layers": 2,
                    "layer_speedup": speed,
                    "bleu": bleu,
                    "batch_size": batch,
                    "model_role": "model",
                    "rougeL": bleu + 10,
                    "chrf": bleu + 20,
                    "flops_speedup_decode": speed * 0.9,
                    "wall_speedup_total": speed * 0.7,
                    "wall_speedup_decode": speed * 0.8 * batch / 8,
                }
            )
    return pd.concat([df, pd.DataFrame(rows)], ignore_index=True)


def warnings(at) -> str:
    return " | ".join(w.value for w in at.warning)


def stale(at) -> str:
    """The warning that marks a result made with other settings ('' when there is none)."""
    return " | ".join(
        w.value for w in at.warning if w.value.startswith("These results are from other settings")
    )


def opened_with(address: dict[str, str], page: str | None = None):
    """A new session opened on a link: the page and its settings in the address."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(APP), default_timeout=APP_TIMEOUT)
    at.query_params.update(address)
    if page:
        at.switch_page(f"sections/{page}.py")
    return at.run()


def small_sweep_on_the_page(multiselects: dict, numbers: dict | None = None, address: dict | None = None):
    """The Trade-offs page's small sweep at target 2x in skip mode on 2 examples, plus the given choices, in a
    session opened on `address` (its settings in the link): the app, and the sweep's table."""
    from app.dashboard.results import SweepResult

    at = opened_with(address or {}, "tradeoffs")
    by_key(at.radio, "to_source").set_value("Run a small sweep here").run()
    for key, value in {"to_targets": [2.0], "to_modes": ["skip"], **multiselects}.items():
        by_key(at.multiselect, key).set_value(value)
    for key, value in {"to_examples": 2, "to_max_new": MAX_NEW, **(numbers or {})}.items():
        by_key(at.number_input, key).set_value(value)
    at.run()
    by_key(at.button, "to_run").click().run()
    assert_clean(at)
    return at, SweepResult.last(at.session_state).table


def footer_start(parquet: bytes) -> int:
    """Where a Parquet file's footer (its schema, row counts and key-value metadata) starts: its length is the
    4 bytes before the closing magic. The pages before it carry their checksums; the footer carries none."""
    return len(parquet) - 8 - int.from_bytes(parquet[-8:-4], "little")


def one_bit_flipped(data: bytes, step: int, start: int = 0, stop: int | None = None):
    """(position, the bytes with one bit flipped there) for every `step`-th byte from `start` to `stop`: the bit
    flipped cycles with the position, so a run of positions flips every bit."""
    for at in range(start, len(data) if stop is None else stop, step):
        flipped = bytearray(data)
        flipped[at] ^= 1 << (at % 8)
        yield at, bytes(flipped)
