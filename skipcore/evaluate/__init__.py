"""Evaluation: quality against cost, by system, each in its own package.

- `sweep`: quality against cost over grids of settings (`SweepConfig`, `run_sweep`, `read_sweep`, the
  executors that run its units in this process or on Ray, and the quality scores and tables).
- `tune`: the fastest schedule that keeps a quality floor, found with Optuna; it runs its trials on the sweep's
  units and executors and writes its rows in the sweep's columns, so it imports from `sweep` (never the reverse).
- `bench`: wall-clock tokens/s of our paths against `generate()`, paired with full depth: `plan` (what a run
  times, checked before any model is built), `run` (the timing), `results` (its results file and table, written
  after every setting), `summary` (a results file in a few lines, and the GPU plan's targets). It imports neither.
- `identity` (here, shared by `sweep` and `tune`): what a resumable run records of its inputs, and how a resume
  is held to it.

transformers' own `generate(assistant_early_exit=n)`, the public baseline a sweep lists beside the policies, is
`skipcore.policies.assisted`.
"""
