"""Helpers shared by the dashboard's pages, one idea each:

- `models`: the sidebar's model picker (shipped, real, a local folder or .gguf file, a public model's shape);
  `loading`: its config and weights, loaded once, with a status while a GGUF file is converted;
  `trained`: what a model was trained for (decoding defaults, whether it is skip-aware: full depth by default if
  not) and how it reads prompts (an instruct model's chat template, or raw text).
- `address`: what the page address holds (every page's widgets are bound to it; the design is named on the pages
  that run it); `state`: the designed schedule every page reads.
- `provenance`: the settings a result was made with, and the mark it gets when the page's settings change.
- `results`: each page's last result, typed, kept for the session and (the long ones) in the run history, reopened
  from there with the page's settings; and the one cache of download files.
- `runstore`: the run history on disk (each run's tables and an SQLite index: any kind of run, one record shape);
  `history`: kept runs compared side by side; `estimates`: how long a run will take, said before it starts.
- `views`: page pieces several pages share (prompts, sampling, a trace's views); `figures`: what a page adds to
  `skipcore.plots`' figures; `numbers`: a chart's numbers beside it as a table and CSV (its text alternative), and
  every table's CSV download; `speculation`: what the pages say of speculative SkipDecode.
- `sweeps`: reading sweep tables (quality and speedup columns, series, the models inside); `runsweep`: the
  Trade-offs page's small sweep and its per-setting progress; `tracefiles`: traces in and out of the browser;
  `paths`: where the shipped model, data and sweeps are.

Everything UI-free that a notebook could want lives in `skipcore.plots` instead.
"""
