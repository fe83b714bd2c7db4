"""The one decode loop and what only it uses: prefill at full depth, then each step runs the layers a depth
policy (`skipcore.policies`) picks, writing K/V only where a layer ran and recomputing nothing.

The pieces, one idea each: `engine` (`SkipEngine`: the loop, in a straight line), `step_runner` (what a policy
calls to run layers: one shared set, or new columns at each row's own position), `cursor` (each row's place in
the loop), `collect` (a finished batch's per-token tables), `cache` (a KV cache that allocates per layer only what
will be written), `masks` (padded-batch attention masks), `attention` (grouped-KV decode attention without
copying K/V), `static_step` (fixed-shape steps, one CUDA graph per layer set), `timing` (per-step times without a
host sync), `sampling` (token choice), `outputs` (what a generate call returns), `trace_rows` (a batch as trace
rows), `forward` (the uncached per-column forward: training's, and the loop's reference in the tests).

Nothing is re-exported here: policies import pieces of this package and the loop imports the policies'
interface, so each module is imported by its own path (`from skipcore.decode.engine import SkipEngine`, or
`from skipcore import SkipEngine`).
"""
