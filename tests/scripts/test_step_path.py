"""SkipDecode's decode step reads in a straight line (docs/architecture.md): at most ten skipcore files and five
frames from the loop to the attention call, the policy not called, measured by scripts/step_path.py on the tiny
models whose layers run lean."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from tests.helpers import REPO

SPEC = importlib.util.spec_from_file_location("step_path", REPO / "scripts/step_path.py")
step_path = sys.modules["step_path"] = importlib.util.module_from_spec(SPEC)  # its dataclass looks itself up
SPEC.loader.exec_module(step_path)


@pytest.mark.parametrize(
    "family, dtype", [("llama", "float32"), ("llama", "bfloat16"), ("opt", "float32"), ("gemma3", "bfloat16")]
)
def test_a_step_touches_ten_files_and_five_frames(model_dirs, family, dtype):
    path = step_path.step_path(model_dirs[family], dtype)
    assert len(path.files) <= 10, sorted(path.files)
    assert len(path.frames) <= 5, path.frames
    assert path.frames[0] == "decode/engine.py:decode_batch"
    assert path.frames[-1] == "kernels/attention.py:decode_sdpa"  # the attention the pass handed the layer
    assert (
        f"kernels/{family}_layer.py:__call__" in path.frames
    )  # the lean layer, called straight from the step
    assert not any(f.startswith(("decode/static_policy.py", "adapters/")) for f in path.frames)
