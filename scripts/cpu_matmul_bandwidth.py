"""How fast torch's own matrix products read weights on this machine: the bandwidth a decode step can really reach.

`bench` places a full-depth decode step on a memory roofline whose denominator is a large copy. A decode step is a
chain of matrix-vector products, and on a CPU torch's kernels for them may read far slower than a copy. This times
`torch.nn.functional.linear` on SmolLM2-135M's matrix shapes (its head, an MLP projection, an attention projection),
float32, over more weights than the caches hold, at 1, 5 and 8 columns (batch 1, a speculative verification pass
over k + 1 = 5 columns, batch 8) and 1 and 2 threads; each the median of `--repeats` runs. Run it on a quiet machine:

    python scripts/cpu_matmul_bandwidth.py

`--kernels linear,blocked` adds what skipcore runs for the LM head (`skipcore.kernels.products`): torch's own
kernel over blocks of 1024 output rows, bit-identical to one product; it pays from two columns up, on the
vocabulary-sized head. `--kernels linear,onednn,fp16` adds two other CPU kernels, to show what a faster decode path
would take: oneDNN with the weights prepacked in its own layout (the same float32 values, summed in another order,
so logits differ from `generate()`'s in their last bits), and fbgemm with the weights rounded to float16 (half the
bytes; no longer the model's weights). GB/s counts the float32 bytes either way, so the columns compare time.

`--dtype bfloat16 --kernels linear,packed` times the bfloat16 products a CPU with native bfloat16 runs: torch's
own (oneDNN, the weight laid out anew at every call) and skipcore's (`skipcore.kernels.products`: the weight
prepacked once, the same outputs bit for bit); GB/s then counts bfloat16 bytes.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from functools import partial

import torch
from torch.utils import mkldnn

from skipcore.kernels.products import head_logits, pack, packed_product

SHAPES = {  # SmolLM2-135M: out x in
    "head 49152x576": (49152, 576),
    "MLP up 1536x576": (1536, 576),
    "attention q 576x576": (576, 576),
}


def products(kernel: str, weights: list[torch.Tensor]) -> list:
    """One callable `x -> x @ w.T` per weight matrix, through `kernel`."""
    if kernel == "linear":
        return [lambda x, w=w: torch.nn.functional.linear(x, w) for w in weights]
    if kernel == "packed":
        return [partial(packed_product, packed=pack(w), bias=None) for w in weights]
    layers = []
    for w in weights:
        layer = torch.nn.Linear(w.shape[1], w.shape[0], bias=False)
        layer.weight.data = w
        layers.append(layer)
    if kernel == "blocked":
        return [partial(head_logits, layer) for layer in layers]
    if kernel == "onednn":
        return [mkldnn.to_mkldnn(layer) for layer in layers]
    # torch's dynamic fp16 quantization is the one route to fbgemm's fp16 kernel in core torch; it is deprecated
    # in favour of torchao, whose CPU kernels are not this one: acceptable for a measurement
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torch.ao.quantization import quantize_dynamic

        return list(quantize_dynamic(torch.nn.Sequential(*layers), {torch.nn.Linear}, dtype=torch.float16))


def read_rate(
    out_features: int,
    in_features: int,
    columns: int,
    repeats: int,
    total_bytes: int,
    kernel: str = "linear",
    dtype: torch.dtype = torch.float32,
) -> tuple[float, float]:
    """Median GB/s of weights read and ms per pass over enough matrices to hold `total_bytes` of them."""
    size = torch.finfo(dtype).bits // 8
    count = max(1, total_bytes // (out_features * in_features * size))
    with torch.no_grad():
        weights = [torch.randn(out_features, in_features).to(dtype) for _ in range(count)]
        product = products(kernel, weights)
        x = torch.randn(columns, in_features).to(dtype)
        times = []
        for _ in range(repeats + 1):  # the first pass warms up (oneDNN picks its kernel on first use)
            t0 = time.perf_counter()
            for p in product:
                p(x)
            times.append(time.perf_counter() - t0)
    times = times[1:]
    t = statistics.median(times)
    return count * out_features * in_features * size / t / 1e9, t * 1e3


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
    parser.add_argument(
        "--kernels",
        default="linear",
        help="comma list of kernels: linear (torch's own, what generate() runs), blocked (skipcore's LM head: "
        "linear over blocks of output rows), onednn, fp16, packed (bfloat16: skipcore's prepacked product) "
        "(default: linear)",
    )
    parser.add_argument(
        "--dtype",
        default="float32",
        choices=["float32", "bfloat16"],
        help="the weights' dtype (default: float32)",
    )
    args = parser.parse_args()
    kernels = args.kernels.split(",")
    unknown = sorted(set(kernels) - {"linear", "blocked", "onednn", "fp16", "packed"})
    if unknown:
        parser.error(f"unknown kernel {unknown[0]!r}; choose from linear, blocked, onednn, fp16, packed")
    dtype = getattr(torch, args.dtype)
    if "packed" in kernels and dtype != torch.bfloat16:
        parser.error("the packed kernel is bfloat16's: add --dtype bfloat16")
    print("| threads | matrix | columns | kernel | GB/s read | ms per pass |")
    print("| --- | --- | --- | --- | --- | --- |")
    for threads in (int(t) for t in args.threads.split(",")):
        torch.set_num_threads(threads)
        for name, (out_features, in_features) in SHAPES.items():
            for columns in (int(c) for c in args.columns.split(",")):
                for kernel in kernels:
                    rate, ms = read_rate(
                        out_features, in_features, columns, args.repeats, args.mib * 2**20, kernel, dtype
                    )
                    print(f"| {threads} | {name} | {columns} | {kernel} | {rate:.1f} | {ms:.1f} |")


if __name__ == "__main__":
    main()
