"""Importing skipcore changes nothing in `transformers`: skipcore's attention dispatch enters its registries when
an engine first takes a model, and a pass changes nothing shared (it names its attention by a layer argument)."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers import REPO

PROBE = """
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
before = set(ALL_ATTENTION_FUNCTIONS)
import skipcore, skipcore.kernels.attention, skipcore.decode.engine, skipcore.policies, skipcore.lens
print(sorted(set(ALL_ATTENTION_FUNCTIONS) - before))
"""


def test_importing_skipcore_registers_no_attention():
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_an_engine_registers_its_dispatch_once_and_a_pass_changes_nothing_shared(model_dirs):
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    from skipcore.decode.engine import SkipEngine
    from skipcore.kernels import attention
    from skipcore.models.loading import load_model
    from skipcore.schedule import Schedule
    from tests.helpers import PROMPTS

    model, tok = load_model(str(model_dirs["llama"]), device="cpu", dtype="float32")
    engine = SkipEngine(model, tok)
    assert ALL_ATTENTION_FUNCTIONS[attention.DISPATCH] is attention.dispatch
    assert ALL_MASK_ATTENTION_FUNCTIONS[attention.DISPATCH] is sdpa_mask
    registry, config = dict(ALL_ATTENTION_FUNCTIONS), model.config.to_dict()
    engine.generate(PROMPTS, Schedule(6, "linear", "skip", max_layers=6, min_layers=2), max_new_tokens=4)
    assert dict(ALL_ATTENTION_FUNCTIONS) == registry and model.config.to_dict() == config
