"""Importing skipcore changes nothing in `transformers`: the decode attention's variants enter its attention
registry when an engine pass first needs them, not as a side effect of an import."""

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


def test_a_pass_registers_the_variant_it_runs_and_restores_the_config():
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    from skipcore.kernels import attention

    config = type("Config", (), {"_attn_implementation": "sdpa"})()
    with attention.grouped_decode_attention(config, "ragged"):
        assert config._attn_implementation == attention.NAME_OWN_KEYS
        assert ALL_ATTENTION_FUNCTIONS[attention.NAME_OWN_KEYS] is attention.own_keys
    assert config._attn_implementation == "sdpa"
