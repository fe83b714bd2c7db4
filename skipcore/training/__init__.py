"""Skip-aware training: full depth, the paper's fixed schedule, or elastic budgets (one model for all).

The pieces, one idea each: `settings` (a run's settings, one typed object), `train` (one run from its settings:
everything checked, then the loop), `idle` (settings the run would not read, refused when set), `examples` (the
training data and the dev data that is never training data), `models` (where the weights start: from scratch,
fine-tuned, LoRA, or resumed), `plan` (which schedule a batch runs), `batching` (the batch layout that lines
columns up with decode steps), `objective` (the per-column skip forward and the target-only loss), `loop` (the
loop, under accelerate), `checkpoint` (what is saved, and restored), `resume` (which checkpoint a run continues
from, with which settings), `folders` (where a run writes, checked first), `distributed` (the accelerator, one
writer, values shared between processes). The record a run saves is `skipcore.models.training_record`. This module
stays import-light: the CLI reads these names while building its parser."""

FAMILIES = ("opt", "gpt2", "llama")  # init_config: families a model can be built from scratch in
INIT_CONFIGS = (*FAMILIES, *(f"{family}-tiny" for family in FAMILIES))  # each family, and its -tiny alias
LR_SCHEDULERS = ("linear", "cosine", "constant", "constant_with_warmup")
SAVE_DTYPES = ("float32", "bfloat16", "float16")
ATTENTION_KERNELS = ("sdpa", "eager")
DEVICES = ("auto", "cpu", "cuda")  # what `distributed.make_accelerator` runs on
MIXED_PRECISIONS = ("no", "bf16", "fp16")  # accelerate's autocast
