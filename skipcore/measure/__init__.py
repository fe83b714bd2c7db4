"""Measurement: what a run cost and how fast it went, each by one definition (design notes, "FLOPs and cache
accounting", "Speedups", "Timing"). Pure functions of numbers and tables, except the estimate, which times the
engine it is handed.

The pieces, one idea each: `costs` (FLOPs and KV-cache bytes, the only place they are computed), `summary` (the
one run summary every printer uses: realised and batch layer speedups, FLOPs, KV, tokens/s), `paired_timing`
(speedups timed in alternation with full depth, with a bootstrap interval and a plausibility flag), `pareto`
(the quality-versus-speedup front and where other points lie against it), `theory` (a designed schedule
costed like a trace, without running a model), `estimate` (how long decoding work will take, from the model's
own timing on this machine, said before a long job starts).
"""
