"""How fast torch's own matrix products read weights on this machine: the bandwidth a decode step can really reach.

`bench` places a full-depth decode step on a memory roofline whose denominator is a large copy. A decode step is a
chain of matrix-vector products, and on a CPU torch's kernels for them may read far slower than a copy. This times
`torch.nn.functional.linear` on SmolLM2-135M's matrix shapes (its head, an MLP projection, an attention projection),
float32, over more weights than the caches hold, at 1, 5 and 8 columns (batch 1, a speculative verification pass
over k + 1 = 5 columns, batch 8) and 1 and 2 threads; each the median of `--repeats` runs. Run it on a quiet machine:

    python scripts/cpu_matmul_bandwidth.py
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

SHAPES = {  # SmolLM2-135M: out x in
    "head 49152x576": (49152, 576),
    "MLP up 1536x576": (1536, 576),
    "attention q 576x576": (576, 576),
}


def read_rate(
    out_features: int, in_features: int, columns: int, repeats: int, total_bytes: int
) -> tuple[float, float]:
    """Median GB/s of weights read and ms per pass over enough matrices to hold `total_bytes` of float32 weights."""
    count = max(1, total_bytes // (out_features * in_features * 4))
    weights = [torch.randn(out_features, in_features) for _ in range(count)]
    x = torch.randn(columns, in_features)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for w in weights:
            torch.nn.functional.linear(x, w)
        times.append(time.perf_counter() - t0)
    t = statistics.median(times)
    return count * out_features * in_features * 4 / t / 1e9, t * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default="1,2", help="comma list of torch threads (default: 1,2)")
    parser.add_argument(
        "--columns", default="1,5,8", help="comma list of columns per product (default: 1,5,8)"
    )
    parser.add_argument(
        "--repeats", type=int, default=7, help="runs per setting, the median kept (default: 7)"
    )
    parser.add_argument(
        "--mib", type=int, default=600, help="weights per run, MiB (default: 600, past the caches)"
    )
    args = parser.parse_args()
    print("| threads | matrix | columns | GB/s read | ms per pass |")
    print("| --- | --- | --- | --- | --- |")
    for threads in (int(t) for t in args.threads.split(",")):
        torch.set_num_threads(threads)
        for name, (out_features, in_features) in SHAPES.items():
            for columns in (int(c) for c in args.columns.split(",")):
                rate, ms = read_rate(out_features, in_features, columns, args.repeats, args.mib * 2**20)
                print(f"| {threads} | {name} | {columns} | {rate:.1f} | {ms:.1f} |")


if __name__ == "__main__":
    main()
