"""`scripts/gpu_tree.sh`: what travels to a lent GPU machine fits the device tool's 64 MiB once shrunk, and
`restore` brings every tracked file back (run in a clone, never in this checkout)."""

from __future__ import annotations

import subprocess

import pytest

from tests.helpers import REPO

pytestmark = pytest.mark.slow  # a clone of the repository with its 200 MiB of shipped data


def test_shrink_fits_the_device_tool_and_restore_brings_everything_back(tmp_path):
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    (clone / "scripts" / "gpu_tree.sh").write_bytes((REPO / "scripts" / "gpu_tree.sh").read_bytes())
    tracked = subprocess.run(["git", "ls-files"], cwd=clone, capture_output=True, text=True).stdout.split()

    def run(*args):
        return subprocess.run(
            ["bash", "scripts/gpu_tree.sh", *args], cwd=clone, capture_output=True, text=True
        )

    assert run("size").returncode == 1  # the whole tree does not fit
    shrunk = run("shrink")
    assert shrunk.returncode == 0, shrunk.stderr
    assert (clone / "data" / "models" / "skipdecode-opt-e2e" / "config.json").is_file()
    assert (
        not (clone / "data" / "sweeps").exists() and not (clone / "data" / "models" / "smollm2-e2e").exists()
    )
    assert not (clone / "results").exists()
    mib = int(shrunk.stdout.split("=")[1].split()[0])
    assert mib < 64
    assert run("restore").returncode == 0
    assert all((clone / path).exists() for path in tracked if path != "scripts/gpu_tree.sh")
