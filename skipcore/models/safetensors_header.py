"""A safetensors file's header, read without its tensors: whether the file is whole, in a fraction of a
second.

A safetensors file is an 8-byte length, a JSON header giving every tensor's byte range, then the tensors. A
file cut short (a killed copy, a full disk) or damaged in its header is known from those two alone, before the
loader reads it, so a model cache (`skipcore.models.gguf`) or an adapter (`skipcore.models.lora`) that cannot
be used is said in one line where it is found, not as a traceback where its weights are read.
"""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path

from skipcore.files import parse_json

LENGTH_BYTES = 8


def _header_bytes(path: Path) -> tuple[bytes, int]:
    """(the length prefix and the JSON header, the file's size); ValueError where the file ends in them."""
    size = path.stat().st_size
    with path.open("rb") as f:
        prefix = f.read(LENGTH_BYTES)
        if len(prefix) < LENGTH_BYTES:
            raise ValueError(f"it holds {size} bytes, fewer than a safetensors header")
        (length,) = struct.unpack("<Q", prefix)
        if length > size - LENGTH_BYTES:
            raise ValueError(f"it ends inside its header ({size:,} bytes, a header of {length:,})")
        return prefix + f.read(length), size


def safetensors_problem(path: Path) -> str | None:
    """Why the safetensors file at `path` cannot be whole, from its header and size alone; None if it can."""
    try:
        raw, size = _header_bytes(path)
        header = parse_json(raw[LENGTH_BYTES:])
        ranges = [v["data_offsets"] for k, v in header.items() if k != "__metadata__"]
        end = max((int(stop) for _, stop in ranges), default=0)
    except OSError as e:
        return e.strerror or str(e)
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        return str(e) if isinstance(e, ValueError) and str(e).startswith("it ") else "its header is not valid"
    described = len(raw) + end
    if described != size:
        return f"it holds {size:,} bytes, its header describes {described:,}"
    return None


def header_digest(path: Path) -> str:
    """SHA-256 of the file's header (its tensors' names, types, shapes and places): what a conversion records
    to know its own weights file again without reading the tensors."""
    raw, _ = _header_bytes(path)
    return hashlib.sha256(raw).hexdigest()
