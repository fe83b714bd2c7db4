"""The one decode loop and what only it uses: prefill at full depth, then each step runs the layers a depth
policy picks, writing K/V only where a layer ran and recomputing nothing.

The pieces, one idea each: `engine` (`SkipEngine`: the loop over a batch, in a straight line, and the one
batch driver over a call's prompts), `checks` (what a call is checked for, once, before any work), `step` (the
step contract every policy implements: `StepState`, `StepOutput`, `StepRunner`, `DepthPolicy`),
`static_policy` (`StaticPolicy`, SkipDecode's schedule, and `as_policy`), `forward` (the passes over a batch's
cache: what a policy calls to run layers, one shared set or new columns at each row's own position; the cached
one-step forward the runner and the static decoder call; the uncached per-column forward of training and the
tests; the masks they attend with), `record` (what the loop keeps of a batch: each row's place, key mask and
positions, each step's record and time, and the finished batch's per-token tables), `cache` (a KV cache that allocates per layer
only what will be written), `static_step` (fixed-shape steps, one CUDA graph per layer set), `sampling` (token
choice), `outputs` (what decoding returns), `trace_rows` (a batch as trace rows).

The attention and products a pass computes with are `skipcore.kernels`', below this package.

Imports run one way: the policies import this package's contract and pieces, and nothing here imports a
policy. Nothing is re-exported here; each module is imported by its own path (`from skipcore.decode.engine
import SkipEngine`, or `from skipcore import SkipEngine`).
"""
