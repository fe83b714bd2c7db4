"""The bench (`python -m skipcore bench`): wall-clock tokens/s of our full-depth, skip and speculative paths against
`generate()`, each setting paired with full depth in one run.

One idea per module: `plan` (what a run times: `BenchPlan`, checked before any model is built), `run` (the timing:
`run_plan`), `results` (the results file and its table, rewritten after every setting), `summary` (a results file
in a few lines, and the GPU plan's targets).
"""
