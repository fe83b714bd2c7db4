"""scripts/gpu_carry.sh: SmolLM2 and its skip-aware fine-tune to a GPU machine over several calls of at most 64 MiB,
rehearsed here: each call is a copy of the script in a machine folder that keeps what earlier calls left, receiving
one part; the last joins them into the package and the fine-tune, byte for byte, or refuses a part that does not
belong."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from skipcore.models.catalog import REAL_MODELS, installed, package_dir

REPO = Path(__file__).resolve().parents[2]
FINE_TUNE = "data/models/skipdecode-smollm2-e2e"
MIB = 1 << 20

pytestmark = pytest.mark.skipif(
    not installed(REAL_MODELS["smollm2-135m"]), reason="smollm2-135m is not installed"
)


def carry(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "scripts/gpu_carry.sh", *args],
        cwd=cwd,
        env={**os.environ, "PYTHON": sys.executable, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def machine(root: Path) -> Path:
    """A stand-in for the GPU machine's copy of the tree: the script, nothing of the model."""
    (root / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "scripts/gpu_carry.sh", root / "scripts")
    return root


def bring(part: Path, there: Path) -> None:
    """One call: its carried part in place of the last call's (which the machine keeps only as received)."""
    shutil.rmtree(there / ".gpu-carry", ignore_errors=True)
    shutil.copytree(part, there / ".gpu-carry" / part.name)


@pytest.mark.slow
def test_the_parts_fit_their_calls_and_join_into_the_package_and_fine_tune(tmp_path):
    parts = tmp_path / "carry"
    done = carry("pack", cwd=REPO, GPU_CARRY_DIR=str(parts))
    assert done.returncode == 0, done.stderr
    numbered = sorted((p for p in parts.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    assert len(numbered) >= 2
    sizes = [(p / "part").stat().st_size for p in numbered]
    assert all(s <= 45 * MIB for s in sizes[:-1]) and sizes[-1] <= 30 * MIB  # with the 16 MiB tree (+ wheels)
    there = machine(tmp_path / "gpu")
    for i, part in enumerate(numbered, 1):
        bring(part, there)
        got = carry("receive", cwd=there)
        assert got.returncode == 0, got.stderr
        if i < len(numbered):
            assert f"parts {' '.join(map(str, range(1, i + 1)))} of {len(numbered)}" in got.stdout
    assert f"all {len(numbered)} parts, sha256 checked" in got.stdout
    gguf = REAL_MODELS["smollm2-135m"].gguf
    pkg = package_dir(REAL_MODELS["smollm2-135m"])
    assert digest(there / ".gpu-received/site" / pkg.name / gguf) == digest(pkg / gguf)
    for f in (REPO / FINE_TUNE).iterdir():
        assert digest(there / FINE_TUNE / f.name) == digest(f)
    assert "already unpacked" in carry("receive", cwd=there).stdout  # the check's own call: nothing again
    # a later call's copy of the tree takes the fine-tune off its path: the kept parts put it back
    shutil.rmtree(there / FINE_TUNE)
    assert f"all {len(numbered)} parts, sha256 checked" in carry("receive", cwd=there).stdout
    for f in (REPO / FINE_TUNE).iterdir():
        assert digest(there / FINE_TUNE / f.name) == digest(f)

    # a part of another pack is refused by the sum, and nothing is unpacked
    other = machine(tmp_path / "gpu2")
    for part in numbered[:-1]:
        bring(part, other)
        carry("receive", cwd=other)
    bad = tmp_path / "bad" / numbered[-1].name
    shutil.copytree(numbered[-1], bad)
    (bad / "part").write_bytes(b"x" * 1000)
    bring(bad, other)
    got = carry("receive", cwd=other)
    assert got.returncode == 1 and "do not match their sha256" in got.stderr
    assert not (other / ".gpu-received/site").exists()


def test_pack_leaves_a_folder_it_did_not_make(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    done = carry("pack", cwd=REPO, GPU_CARRY_DIR=str(mine))
    assert done.returncode == 1 and "was not made by this script" in done.stderr
    assert (mine / "notes.txt").read_text() == "keep"
