"""The fast path's arithmetic, apart from the loop that calls it: what the engine's passes compute with, chosen
by device and dtype, each giving the bits `generate()` gives (or saying where it cannot).

- door.py: the one way in for the adapters and the decode loop: a model put on the kernels when an engine takes it,
  its `Kernels`, and the layer arguments each pass hands its layers (attention, products, query groups)
- attention.py: decode attention over grouped KV heads read in place, a sliding layer's window from the end, a
  ragged pass's queries each over its own keys, and the alignment an accelerator's kernel needs
- attention_dtypes.py: the dtypes the decode attention runs in, as the command line names them (no torch)
- precision.py: the dtype a model runs in as a typed value (`DtypeChoice`: the dtype, the reason, and what its
  passes keep of full depth's bits, `Exactness`), given to the engine and kept in every run's metadata
- products.py: the passes' products on the CPU, the modules' bits sooner: bfloat16 linears with oneDNN-prepacked
  weights, the float32 LM head over vocabulary blocks, each module called where neither applies
- fused.py: the fused decode step of the GPU's fixed-shape passes: a Llama-family, OPT or Gemma 3 layer in fewer, fuller
  kernels (Q/K/V and gate/up as one product each, the element-wise work in bodies `torch.compile` compiles once per
  shape)
- llama_layer.py, opt_layer.py, gemma3_layer.py: a stock layer's forward on the CPU without its module calls, the
  same bits (lean.py: when one may run instead of its module)

These import nothing of skipcore above the foundation (errors): the adapters and the decode loop call them through
the door, never the other way. Nothing is re-exported here, so the command line's --help can read attention_dtypes without torch.
"""
