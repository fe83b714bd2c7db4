"""Helpers shared by the dashboard's pages, one idea each:

- `models`: the sidebar's model picker (shipped, real, a local folder or .gguf file, a public model's shape);
  `loading`: its config and weights, loaded once, with a status while a GGUF file is converted;
  `trained`: what a model was trained for (decoding defaults, whether it is skip-aware).
- `address`: what the page address holds (every page's widgets are bound to it; the design is named on the pages
  that run it); `state`: the designed schedule every page reads.
- `provenance`: the settings a result was made with, and the mark it gets when the page's settings change.
- `results`: each page's last result, typed and kept for the session, and the one cache of download files.
- `runstore`: the run history on disk (traces and an SQLite index); `history`: kept runs compared side by side.
- `views`: page pieces several pages share (prompts, sampling, a trace's views); `figures`: what a page adds to
  `skipcore.plots`' figures; `speculation`: what the pages say of speculative SkipDecode.
- `sweeps`: reading sweep tables (quality and speedup columns, series, the models inside); `runsweep`: the
  Trade-offs page's small sweep and its per-setting progress; `tracefiles`: traces in and out of the browser;
  `paths`: where the shipped model, data and sweeps are.

Everything UI-free that a notebook could want lives in `skipcore.plots` instead.
"""
