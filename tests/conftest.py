"""Shared fixtures: small random models of every supported family, saved once per session, and one private Ray
instance for the tests that ask for it (`ray_address`)."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
import torch

from skipcore.decode.sampling import Sampling, TokenPicker
from skipcore.models.testing import make_tiny_model, tiny_tokenizer

# Test workers share two cores: one torch thread each avoids oversubscription (it slowed runs tenfold).
torch.set_num_threads(1)

FAMILIES = ["opt", "opt-proj", "gpt2", "llama", "mistral", "qwen2", "qwen3", "gemma3"]
PROMPTS = [
    "The Eagle is a cheap",
    "Green Man serves Italian food near the city centre and is family friendly",
    "Skipping",
]


@pytest.fixture(scope="session")
def tokenizer():
    return tiny_tokenizer()


@pytest.fixture(scope="session")
def model_dirs(tmp_path_factory, tokenizer):
    """family -> directory of a saved random model with its tokenizer."""
    root = tmp_path_factory.mktemp("models")
    return {f: make_tiny_model(f, root / f, tokenizer=tokenizer) for f in FAMILIES}


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


def _is_ray(pid: int) -> bool:
    try:
        return b"ray" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


@pytest.fixture(scope="session")
def ray_address():
    """One private Ray instance for the whole session (2 CPUs, loopback only, an 80 MiB object store), started
    only if a test asks for it, so no other test pays its start-up; the driver is this process. Yields its
    address (for drivers in subprocesses) and checks at the end that no Ray process outlives the session."""
    from skipcore.evaluate.ray_executor import start_local_ray

    start_local_ray(num_cpus=2, object_store_mb=80)
    import ray

    yield ray.get_runtime_context().gcs_address
    started = [p for p in descendants(os.getpid()) if _is_ray(p)]  # Ray's own and the workers tests started
    ray.shutdown()
    deadline = time.monotonic() + 20
    while (left := set(started) & set(descendants(os.getpid()))) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"Ray processes outlived the session: {sorted(left)}"


def as_trained_model(src: Path, dst: Path, max_new_tokens: int, decay_span: int, median_target: int) -> Path:
    """A copy of a tiny model that says, as a skipcore-trained one does, what it was trained for."""
    shutil.copytree(src, dst)
    settings = {
        "format": "skipcore-training/1",
        "generation": {"max_new_tokens": max_new_tokens, "decay_span": decay_span},
        "data": {"median_target_tokens": median_target},
    }
    (dst / "skipcore_training.json").write_text(json.dumps(settings))
    return dst


def train_argv(model_dir, out, *extra: str) -> list[str]:
    """`train` on a tiny model into `out`, with no progress bar and one thread (the machine's cores are shared)."""
    return ["train", "--no-progress", "--threads", "1", "--model", str(model_dir), "--out", str(out), *extra]


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


class RecordingPicker(TokenPicker):
    """Greedy picking that keeps every step's logits, to compare them with a recomputation."""

    def __init__(self):
        super().__init__(Sampling(), torch.device("cpu"))
        self.logits = []

    def __call__(self, logits):
        self.logits.append(logits.clone())
        return super().__call__(logits)


@pytest.fixture(autouse=True)
def run_history(tmp_path, monkeypatch) -> Path:
    """Every test keeps its dashboard runs in a folder of its own, never in the user's run history."""
    monkeypatch.setenv("SKIPCORE_APP_RUNS", str(tmp_path / "runs"))
    return tmp_path / "runs"


@pytest.fixture
def model_dir(model_dirs, monkeypatch) -> Path:
    """The dashboard opens on the tiny OPT model instead of the shipped one."""
    from app.dashboard import paths

    monkeypatch.setenv(paths.MODEL_ENV, str(model_dirs["opt"]))
    monkeypatch.delenv(paths.MAX_TRACE_MB_ENV, raising=False)
    return model_dirs["opt"]
