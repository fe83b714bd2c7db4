"""A GGUF file's metadata, read without its tensors: the model's config in a fraction of a second.

Converting a GGUF file (`skipcore.models.gguf`) dequantizes every tensor; what wants only the model's sizes (the
`models` listing, the designer, a sweep's checks before its first row) reads the header instead: the key-value
metadata and the tensor table at the start of the file. A file that a package ships in chunks is read across its
chunks in order, so nothing is assembled or written. The config is transformers' own mapping of llama.cpp's keys
(`transformers.integrations.ggml`), applied as `from_pretrained(folder, gguf_file=name)` applies it; a test holds
the two equal.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from skipcore.errors import ModelError

MAGIC = b"GGUF"
VERSIONS = (2, 3)  # v1 counted in 32 bits; llama.cpp has written v3 since 2023
SCALARS = {
    0: "<B",
    1: "<b",
    2: "<H",
    3: "<h",
    4: "<I",
    5: "<i",
    6: "<f",
    7: "<?",
    10: "<Q",
    11: "<q",
    12: "<d",
}
STRING, ARRAY = 8, 9


@dataclass(frozen=True)
class GgufHeader:
    """What a GGUF file says about its model: the metadata by key (a string array, such as the vocabulary, by its
    length only) and the names of its tensors."""

    fields: dict[str, object]
    tensor_names: tuple[str, ...]


class _Bytes:
    """The bytes of a file, or of its chunks one after another, read forward; a length beyond what is left (a
    damaged header's garbage) ends the read at once instead of asking for that much memory."""

    def __init__(self, parts: Sequence[Path]) -> None:
        self.parts = list(parts)
        self.left = sum(p.stat().st_size for p in self.parts)
        self.file = open(self.parts.pop(0), "rb")  # noqa: SIM115 (closed by close(), after the last read)

    def read(self, n: int) -> bytes:
        if n > self.left:
            raise EOFError("the file ends inside its header")
        self.left -= n
        out = self.file.read(n)
        while len(out) < n:
            if not self.parts:
                raise EOFError("the file ends inside its header")
            self.file.close()
            self.file = open(self.parts.pop(0), "rb")  # noqa: SIM115
            out += self.file.read(n - len(out))
        return out

    def unpack(self, fmt: str) -> tuple:
        return struct.unpack(fmt, self.read(struct.calcsize(fmt)))

    def string(self) -> str:
        (length,) = self.unpack("<Q")
        return self.read(length).decode("utf-8", errors="replace")

    def close(self) -> None:
        self.file.close()


def read_header(parts: Sequence[Path], name: str) -> GgufHeader:
    """The header of the GGUF file made of `parts` (one path for a plain file), refused in one line naming the
    model `name` (and the file, where `name` is not its path) where it is not a GGUF file or ends early."""
    said = name if name == str(parts[0]) else f"{name} ({Path(parts[0]).name})"
    try:
        data = _Bytes(parts)
    except OSError as e:
        raise ModelError(f"could not read model {said!r}: {e.strerror or e}") from e
    try:
        if data.read(4) != MAGIC:
            raise ModelError(f"could not read model {said!r}: it does not start as a GGUF file does")
        version, tensor_count, field_count = data.unpack("<IQQ")
        if version not in VERSIONS:
            raise ModelError(f"could not read model {said!r}: GGUF version {version} (readable: 2 and 3)")
        fields = {}
        for _ in range(field_count):
            key = data.string()
            (kind,) = data.unpack("<I")
            fields[key] = _value(data, kind)
        tensor_names = []
        for _ in range(tensor_count):
            tensor_names.append(data.string())
            (dims,) = data.unpack("<I")
            data.read(8 * dims + 12)  # its shape, type and offset
    except (EOFError, struct.error, ValueError, OSError, OverflowError, MemoryError) as e:
        raise ModelError(
            f"could not read model {said!r}: its GGUF header is damaged or incomplete ({e})"
        ) from e
    finally:
        data.close()
    if not isinstance(fields.get("general.architecture"), str):
        raise ModelError(f"could not read model {said!r}: its GGUF header names no architecture")
    return GgufHeader(fields, tuple(tensor_names))


def _value(data: _Bytes, kind: int) -> object:
    if kind in SCALARS:
        return data.unpack(SCALARS[kind])[0]
    if kind == STRING:
        return data.string()
    if kind != ARRAY:
        raise ValueError(f"unknown value type {kind}")
    item, count = data.unpack("<IQ")
    if item in SCALARS:
        fmt = SCALARS[item]
        return list(struct.unpack(f"<{count}{fmt[1]}", data.read(count * struct.calcsize(fmt))))
    if item != STRING:
        raise ValueError(f"an array of value type {item}")
    for _ in range(count):  # a vocabulary or merge table: only its length is kept
        (length,) = data.unpack("<Q")
        data.read(length)
    return count


def config_dict(header: GgufHeader) -> dict:
    """The config dict transformers makes of this header (`load_gguf_checkpoint`, its config part)."""
    from transformers.integrations.ggml import GGUF_CONFIG_DEFAULTS_MAPPING, GGUF_CONFIG_MAPPING

    arch = str(header.fields["general.architecture"])
    # transformers reads a llama file named exactly "mistral" as Mistral, its one rename of a family skipcore runs
    family = "mistral" if "llama" in arch and header.fields.get("general.name") == "mistral" else arch
    config: dict = {"tie_word_embeddings": "output.weight" not in header.tensor_names}  # llama.cpp's rule
    config.update(GGUF_CONFIG_DEFAULTS_MAPPING.get(family, {}))
    for key, value in header.fields.items():
        prefix, _, rest = key.replace(arch, family).partition(".")
        renamed = GGUF_CONFIG_MAPPING.get(prefix, {}).get(rest)
        if renamed is None or renamed == -1:
            continue
        if isinstance(value, list) and len(value) == 1:
            value = value[0]
        config[renamed] = value.replace(arch, family) if isinstance(value, str) else value
    if config.get("model_type") == "gemma3":  # the file holds the text model of Gemma 3 alone
        config["model_type"] = "gemma3_text"
    if "vocab_size" not in config and isinstance(header.fields.get("tokenizer.ggml.tokens"), int):
        config["vocab_size"] = header.fields["tokenizer.ggml.tokens"]
    return config
