"""Skip-aware training: full depth, the paper's fixed schedule, or elastic budgets (one model for all).

The pieces, one idea each: `batching` (the batch layout that lines columns up with decode steps), `plan`
(which schedule a batch runs), `objective` (the per-column skip forward and the target-only loss),
`models` (where the weights start), `checkpoint` (what is saved and how to resume), `loop` (accelerate).
This module stays import-light: the CLI reads these names while building its parser.
"""

FAMILIES = ("opt", "gpt2", "llama")  # --init-config: families a model can be built from scratch in
LR_SCHEDULERS = ("linear", "cosine", "constant", "constant_with_warmup")
SAVE_DTYPES = ("float32", "bfloat16", "float16")
