"""Two revisions of skipcore timed against each other, paired: is a refactor within noise of the code before it?

    python scripts/paired_revisions.py --before 2cc2704 [--after WORKTREE] --models data/models/skipdecode-opt-e2e \
        --dtypes float32,bfloat16 --batch-sizes 1,8 --new-tokens 32 --repeats 7 --out results/paired_revisions.md

Each revision runs in its own long-lived process (its tree on PYTHONPATH: `git archive` of `--before`, the working
tree for `--after WORKTREE`), which loads each model once and times one `SkipEngine.generate` call per request at
full depth on the first E2E test prompts. The driver asks the two in alternation (before, after, after, before,
...) after an untimed warm-up of each, so a slow spell of a shared machine hits both sides of a pair; the result is
the median of the per-pair ratios (before time / after time: above 1, the new code is faster) with its bootstrap
95% interval (`skipcore.measure.paired_timing`). The outputs of the two are compared too: a refactor that changed a
token is not within noise, it is wrong.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

WORKER = r"""
import json, sys, time
import torch
from skipcore.data import format_prompt, load_examples
from skipcore.decode.engine import SkipEngine
from skipcore.models.loading import load_model

import skipcore
print(f"worker: {skipcore.__file__}", file=sys.stderr, flush=True)
torch.set_num_threads(int(sys.argv[1]))
engines = {}
for line in sys.stdin:
    ask = json.loads(line)
    key = (ask["model"], ask["dtype"])
    if key not in engines:
        model, tok = load_model(ask["model"], device="cpu", dtype=ask["dtype"])[:2]
        examples = load_examples("data/e2e_synth", "test", limit=8)
        engines[key] = (SkipEngine(model, tok), [format_prompt(e.task, e.source) for e in examples], model.config)
    engine, prompts, config = engines[key]
    start = time.perf_counter()
    result = engine.generate(prompts[: ask["batch"]], None, max_new_tokens=ask["new_tokens"], batch_size=ask["batch"])
    seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "texts": list(result.texts)}), flush=True)
"""


def check(args: argparse.Namespace) -> None:
    """Every input refused in one line before a worker starts: revisions git knows, models that exist, dtypes,
    counts."""
    for flag, revision in (("--before", args.before), ("--after", args.after)):
        if revision == "WORKTREE" and flag == "--after":
            continue
        known = subprocess.run(
            ["git", "rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}"],
            cwd=REPO,
            capture_output=True,
        )
        if known.returncode:
            raise SystemExit(f"error: {flag} {revision!r} is not a revision of this repository")
    for model in args.models.split(","):
        if not (REPO / model).is_dir():
            raise SystemExit(f"error: --models: no model folder {model!r}")
    for dtype in args.dtypes.split(","):
        if dtype not in ("float32", "bfloat16", "float16"):
            raise SystemExit(f"error: --dtypes: {dtype!r} is not float32, bfloat16 or float16")
    try:
        sizes = [int(b) for b in args.batch_sizes.split(",")]
    except ValueError:
        sizes = [0]
    if min(sizes) < 1 or args.new_tokens < 1 or args.repeats < 1 or args.threads < 1:
        raise SystemExit(
            "error: --batch-sizes, --new-tokens, --repeats and --threads must be positive integers"
        )


def tree_of(revision: str, into: Path) -> Path:
    """The package of `revision` (git archive) under `into`; the shipped data is read from this checkout."""
    into.mkdir(parents=True)
    archive = into / "tree.tar"
    subprocess.run(["git", "archive", "-o", str(archive), revision, "skipcore"], cwd=REPO, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into / "tree", filter="data")
    return into / "tree"


class Worker:
    def __init__(self, tree: Path, threads: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-P", "-c", WORKER, str(threads)],
            cwd=REPO,
            env={"PYTHONPATH": str(tree), "OMP_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "false",
                 "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )  # fmt: skip

    def time(self, **ask) -> dict:
        self.proc.stdin.write(json.dumps(ask) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"a worker stopped (exit {self.proc.wait()}); its error is above")
        return json.loads(line)


def main() -> None:
    from skipcore.measure.paired_timing import paired_ratio

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before", required=True, help="a git revision")
    p.add_argument("--after", default="WORKTREE", help="a git revision, or WORKTREE (this checkout as it is)")
    p.add_argument("--models", default="data/models/skipdecode-opt-e2e")
    p.add_argument("--dtypes", default="float32,bfloat16")
    p.add_argument("--batch-sizes", default="1,8")
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", type=Path, default=Path("results/paired_revisions.md"))
    args = p.parse_args()
    check(args)
    with tempfile.TemporaryDirectory() as tmp:
        before_tree = tree_of(args.before, Path(tmp) / "before")
        after_tree = REPO if args.after == "WORKTREE" else tree_of(args.after, Path(tmp) / "after")
        before, after = Worker(before_tree, args.threads), Worker(after_tree, args.threads)
        lines = [
            f"# {args.after} against {args.before}, paired (before time / after time: above 1, faster now)",
            "",
            f"`python scripts/paired_revisions.py --before {args.before} --after {args.after} --models "
            f"{args.models} --dtypes {args.dtypes} --batch-sizes {args.batch_sizes} --new-tokens "
            f"{args.new_tokens} --repeats {args.repeats} --threads {args.threads}`: full depth, the first E2E test "
            "prompts, one generate call per run, in alternation after a warm-up of each.",
            "",
            "| model | dtype | batch | ratio [95%] | before s (median) | after s (median) | same texts |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        for model in args.models.split(","):
            for dtype in args.dtypes.split(","):
                for batch in map(int, args.batch_sizes.split(",")):
                    ask = {"model": model, "dtype": dtype, "batch": batch, "new_tokens": args.new_tokens}
                    first_b, first_a = before.time(**ask), after.time(**ask)  # warm-up, untimed
                    same = first_b["texts"] == first_a["texts"]
                    times_b, times_a = [], []
                    for r in range(args.repeats):
                        order = [(before, times_b), (after, times_a)]
                        for worker, times in order if r % 2 == 0 else order[::-1]:
                            times.append(worker.time(**ask)["seconds"])
                    ratio = paired_ratio(times_b, times_a)
                    row = (
                        f"| {Path(model).name} | {dtype} | {batch} | {ratio.median:.2f} [{ratio.lo:.2f}, {ratio.hi:.2f}] | "
                        f"{sorted(times_b)[len(times_b) // 2]:.3f} | {sorted(times_a)[len(times_a) // 2]:.3f} | "
                        f"{'yes' if same else 'NO'} |"
                    )
                    print(row, flush=True)
                    lines.append(row)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp_out = args.out.with_suffix(".tmp")
    tmp_out.write_text("\n".join(lines) + "\n")
    tmp_out.replace(args.out)
    print(f"written {args.out}")


if __name__ == "__main__":
    main()
