"""The skipcore files one decode step runs through, and the skipcore frames from the loop to SDPA: the measure of a
straight step (docs/architecture.md). A probe on a tiny random model; it times nothing.

    python scripts/step_path.py [family] [dtype] [dynamic|static]     (default: llama float32 dynamic)

It decodes a batch once to warm up, then again, recording every skipcore function called during the second
decode step (a profile hook) and the deepest chain of skipcore frames under `decode_batch` that reaches SDPA.
tests/scripts/test_step_path.py holds SkipDecode's step to ten files and five frames.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch.nn.functional as F

import skipcore
import skipcore.decode.forward as forward
from skipcore.decode.engine import SkipEngine
from skipcore.models.loading import load_model
from skipcore.models.testing import make_tiny_model
from skipcore.schedule import Schedule

PROMPTS = ["hello there", "a b c"]
PACKAGE = str(Path(skipcore.__file__).parent) + "/"
LOOP = "decode/engine.py"


@dataclass(frozen=True)
class StepPath:
    files: frozenset[
        str
    ]  # the skipcore files (paths inside the package) the step called into, the loop's included
    frames: tuple[str, ...]  # "file:function", from `decode_batch` down to the function that calls SDPA


def ours(filename: str) -> str | None:
    """A skipcore file's path inside the package; None for any other file."""
    inside = filename.removeprefix(PACKAGE)
    return inside if inside != filename else None


def step_path(folder: str | Path, dtype: str = "float32", static: bool = False) -> StepPath:
    """The second decode step of a static schedule on the model in `folder`, as files and frames."""
    model, tok = load_model(str(folder), device="cpu", dtype=dtype)[:2]
    engine = SkipEngine(model, tok, static=static)
    schedule = Schedule(6, "linear", "skip", max_layers=6, min_layers=2)
    engine.generate(PROMPTS, schedule, max_new_tokens=3)  # warm-up

    files: set[str] = {LOOP}
    chains: list[list[str]] = [[]]
    recording = {"on": False, "steps": 0}
    sdpa, advance = F.scaled_dot_product_attention, forward.EngineStepRunner.advance

    def profile(frame, event, arg):
        if event == "call" and recording["on"] and (name := ours(frame.f_code.co_filename)):
            files.add(name)

    def spy(*args, **kwargs):
        if recording["on"]:
            frame, chain = sys._getframe(1), []
            while frame is not None:
                if name := ours(frame.f_code.co_filename):
                    chain.append(f"{name}:{frame.f_code.co_name}")
                if frame.f_code.co_name == "decode_batch":
                    break
                frame = frame.f_back
            if len(chain) > len(chains[0]):
                chains[0] = chain
        return sdpa(*args, **kwargs)

    def counting(self):
        recording["steps"] += 1
        recording["on"] = recording["steps"] == 2  # the second decode step, whole
        return advance(self)

    F.scaled_dot_product_attention, forward.EngineStepRunner.advance = spy, counting
    sys.setprofile(profile)
    try:
        engine.generate(PROMPTS, schedule, max_new_tokens=4)
    finally:
        sys.setprofile(None)
        F.scaled_dot_product_attention, forward.EngineStepRunner.advance = sdpa, advance
    return StepPath(frozenset(files), tuple(reversed(chains[0])))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("family", nargs="?", default="llama", help="a tiny test model's family (default: llama)")
    p.add_argument("dtype", nargs="?", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("cache", nargs="?", default="dynamic", choices=["dynamic", "static"])
    args = p.parse_args()
    try:
        folder = make_tiny_model(args.family, tempfile.mkdtemp())
    except KeyError:
        raise SystemExit(f"error: no tiny test model of the family {args.family!r}") from None
    path = step_path(folder, args.dtype, static=args.cache == "static")
    print(f"{len(path.files)} skipcore files, the loop's own ({LOOP}) included: {sorted(path.files)}")
    print(f"{len(path.frames)} skipcore frames from decode_batch to SDPA: {list(path.frames)}")


if __name__ == "__main__":
    main()
