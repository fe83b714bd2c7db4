"""bfloat16 linear layers on the CPU through oneDNN with their weights prepacked once: the same products, bit for
bit, sooner.

On a CPU where torch sends a bfloat16 `F.linear` to oneDNN (AVX-512 or AMX; `torch.ops.mkldnn.
_is_mkldnn_bf16_supported()`), every call lays the weight out anew in oneDNN's blocked format before the product.
A decode step reads each weight once with a few rows, so that per-call work is a large share of it: on SmolLM2-135M's
shapes the product with the weight prepacked (`torch.ops.mkldnn._reorder_linear_weight`, then
`_linear_pointwise`, what torch's own compiler emits for frozen bfloat16 linears) reads the weights 1.5-3x faster
(`python scripts/cpu_matmul_bandwidth.py --dtype bfloat16 --kernels linear,packed`). Its kernel sums each output
in the same order, so the result is the plain product's bit for bit: tests/kernels/test_packed_linear.py checks
that over millions of outputs at 1-40 rows, where a product summed in another order differs on hundreds. Where this
CPU or torch build might not keep that order, `PackedLinears` checks each weight shape once against `F.linear`
(at one row and eight) before it packs it, and leaves a shape that differs to `F.linear`. A layer's Q, K and V
projections (and gate and up) are packed side by side as one matrix, so a step makes one product where it made
three small ones: each output is still its own dot product, the same bits.

The packed forward is switched on only inside `PackedLinears.active()`, around the engine's own passes, so
`generate()`, training and anything else see the model's modules as loaded; products below torch's own oneDNN
threshold, outside inference (autograd) or in another dtype run `F.linear` as before.

One row is a case apart. oneDNN multiplies a single row by its own kernel, which for some shapes sums in another
order than the kernel for several rows (SmolLM2's down projection, 1536 wide: a row of a 2-9-row product differs
from the same row alone in 10-65% of random draws, `python scripts/bf16_cpu_probes.py rows`; every other SmolLM2
shape agrees). A batch of one row decodes one row per step, as `generate()` does, but a speculative verification
multiplies its k + 1 columns at once, so those columns would not get the bits the one-row steps give (and the
drafts' tokens part from full depth's at near-ties). Inside `column_products(one_row=True)` a product of several rows whose
shape sums them unlike one row (probed once per shape) runs one row at a time: each row its one-row bits, for the
price of reading that weight again per row (the other products stay whole).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

ONEDNN_MIN_MACS = 16 * 16 * 16  # torch sends a bfloat16 product to oneDNN only above this many multiply-adds
SIBLINGS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))  # linears a layer feeds the same input
# torch's bfloat16 product keeps one kernel for products of up to this many rows on the CPUs measured; above it an
# AMX Xeon's oneDNN takes another kernel, which sums a row in another order than a smaller product does (a row of a
# 33-200-row product differs from the same row in 8-row products on 2-199 of its outputs, SmolLM2's shapes)
SMALL_ROWS = 32
# a decode step's one row (a matrix-vector kernel), a batch's rows (a matrix kernel), the most rows packed
PROBE_ROWS = (1, 8, SMALL_ROWS)
ROW_DRAWS = 3  # random inputs per row count when asking whether a shape sums rows as it sums one


def packing_applies(model: nn.Module) -> bool:
    """Whether `model`'s linears can run prepacked: bfloat16 weights on a CPU whose torch sends such products to
    oneDNN."""
    param = next(model.parameters(), None)
    return (
        param is not None
        and param.device.type == "cpu"
        and param.dtype == torch.bfloat16
        and torch.backends.mkldnn.is_available()
        and torch.backends.mkldnn.enabled
        and torch.ops.mkldnn._is_mkldnn_bf16_supported()
    )


def packed_product(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """`F.linear(x, weight, bias)` with `packed` the weight laid out by `pack`."""
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


def pack(weight: torch.Tensor) -> torch.Tensor:
    """`weight` (out, in) in oneDNN's layout for `packed_product` (a copy: the module keeps its own)."""
    with torch.no_grad():
        return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), 1)


def agrees(members: tuple[nn.Linear, ...], packed: torch.Tensor, bias: torch.Tensor | None) -> bool:
    """Whether the packed product gives the members' own outputs, side by side, bit for bit on random rows of
    each probed count."""
    generator = torch.Generator().manual_seed(0)
    w = members[0].weight
    with torch.no_grad():
        for rows in PROBE_ROWS:
            x = torch.randn(rows, w.shape[1], generator=generator).to(w.dtype)
            want = torch.cat([F.linear(x, m.weight, m.bias) for m in members], dim=-1)
            if not torch.equal(packed_product(x, packed, bias), want):
                return False
    return True


def rows_alike(product, width: int, dtype: torch.dtype) -> bool:
    """Whether `product` gives every row of a product of 2-9 rows (a verification's k + 1 for k up to 8) the
    bits that row gets alone, on `ROW_DRAWS` random inputs of each count. A kernel that sums one row in its own
    order shows it in a share of draws only (10-65% on SmolLM2's down projection), hence the many draws."""
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for rows in range(2, 10):
            for _ in range(ROW_DRAWS):
                x = torch.randn(rows, width, generator=generator).to(dtype)
                if not torch.equal(product(x), torch.cat([product(row) for row in x.split(1)])):
                    return False
    return True


def row_by_row(product, x: torch.Tensor) -> torch.Tensor:
    """`product(x)` computed one row of `x` at a time."""
    return in_row_chunks(product, x, 1)


def in_row_chunks(product, x: torch.Tensor, rows: int) -> torch.Tensor:
    """`product(x)` computed `rows` rows of `x` at a time."""
    flat = x.reshape(-1, x.shape[-1])
    out = torch.cat([product(chunk) for chunk in flat.split(rows)])
    return out.reshape(*x.shape[:-1], out.shape[-1])


def row_count(x: torch.Tensor) -> int:
    """Rows of a product's input `x`: every dimension but the last."""
    return x.numel() // x.shape[-1] if x.shape[-1] else 0


def takes_plain(x: torch.Tensor, rows: int, macs_per_row: int) -> bool:
    """Whether torch's own product of `x` (`rows` rows) by a weight of `macs_per_row` multiply-adds per row would
    not run on oneDNN in bfloat16 (below its threshold, outside inference, another dtype), or would run another
    kernel than the packed one's rows get (more than `SMALL_ROWS` rows: a prefill, which must be `generate()`'s):
    then `F.linear` runs, for its bits."""
    return (
        rows * macs_per_row <= ONEDNN_MIN_MACS
        or rows > SMALL_ROWS
        or x.dtype != torch.bfloat16
        or torch.is_grad_enabled()
    )


def sibling_groups(model: nn.Module, linears: list[nn.Linear]) -> list[tuple[nn.Linear, ...]]:
    """`linears` as units of one product: a layer's Q, K and V projections (and gate and up) as one wider matrix
    where they share an input width and bias-ness, every other linear alone."""
    eligible = {id(m) for m in linears}
    grouped: set[int] = set()
    units: list[tuple[nn.Linear, ...]] = []
    for module in model.modules():
        for names in SIBLINGS:
            members = tuple(getattr(module, n, None) for n in names)
            if (
                all(isinstance(m, nn.Linear) and id(m) in eligible for m in members)
                and len({m.in_features for m in members}) == 1
                and len({m.bias is None for m in members}) == 1
            ):
                units.append(members)
                grouped.update(id(m) for m in members)
    return units + [(m,) for m in linears if id(m) not in grouped]


class PackedLinears:
    """Prepacked copies of a bfloat16 model's `nn.Linear` weights, remade when a weight changes (its storage or
    its version), and a scope in which those linears use them.

    Siblings fed the same input (a layer's Q, K and V projections; gate and up) are packed as one matrix: the
    first of them called multiplies the input once by all, and each returns its own slice of the product. Each
    output is still one dot product summed in the same order, so the slices are the separate products' bit for
    bit (checked per shape, as for one linear); a decode step then makes fewer, larger products."""

    def __init__(self, model: nn.Module) -> None:
        # a linear whose forward is already replaced on the instance (accelerate's hooks) keeps it
        linears = (
            [m for m in model.modules() if type(m) is nn.Linear and "forward" not in vars(m)]
            if packing_applies(model)
            else []
        )
        self.units = sibling_groups(model, linears)
        self._packed: dict[tuple[int, ...], tuple[tuple, torch.Tensor, torch.Tensor | None]] = {}
        self._shape_agrees: dict[tuple, bool] = {}
        self._rows_alike: dict[tuple, bool] = {}  # (weight shape, bias, packed, threads) -> rows_alike
        self._one_row = False  # inside column_products, for a one-row batch
        self._columns = False  # inside column_products
        self._live: dict[int, _LiveUnit] = {}  # inside active(): each packed unit, by its first member's id

    def packed(self, members: tuple[nn.Linear, ...]) -> tuple[torch.Tensor, torch.Tensor | None] | None:
        """The unit's packed weight and bias (its members' side by side), packed now if new or changed; None
        where its shape does not agree."""
        weights = [m.weight for m in members]
        if any(w.dtype != torch.bfloat16 or w.device.type != "cpu" for w in weights):
            return None
        unit = tuple(id(m) for m in members)
        key = tuple((w.data_ptr(), w._version) for w in weights)
        held = self._packed.get(unit)
        if held is not None and held[0] == key:
            return held[1], held[2]
        with torch.no_grad():
            weight = weights[0] if len(members) == 1 else torch.cat(weights)
            bias = None if members[0].bias is None else torch.cat([m.bias for m in members]).detach()
        packed = pack(weight)
        shape = (tuple(w.shape for w in weights), bias is not None)
        if shape not in self._shape_agrees:
            self._shape_agrees[shape] = agrees(members, packed, bias)
        if not self._shape_agrees[shape]:
            return None
        self._packed[unit] = (key, packed, bias)
        return packed, bias

    @contextmanager
    def active(self) -> Iterator[None]:
        """The model's linears run their packed products inside this scope (a no-op where packing does not
        apply; a shape left unpacked runs `F.linear`, as its module would); on exit each is its own module again."""
        swapped, outer = [], self._live
        self._live = {}
        # torch's own product leaves oneDNN when it is switched off (torch.backends.mkldnn.flags): so do these
        units = self.units if torch.backends.mkldnn.enabled else []
        try:
            for members in units:
                held = self.packed(members)
                if held is None:  # unpacked: the plain product, split where column_products asks
                    for linear in members:
                        plain = _plain_product(linear)
                        rule = self._row_rule(
                            plain, tuple(linear.weight.shape), linear.bias is not None, False
                        )
                        linear.forward = self._by_small_products(_split_forward(plain, rule))
                        swapped.append(linear)
                    continue
                packed, bias = held
                product = _SharedProduct(packed, bias, count=len(members))
                width = members[0].in_features
                shape = (sum(m.out_features for m in members), width)
                product.splits = self._row_rule(product.product, shape, bias is not None, True)
                start, bounds = 0, []
                for index, linear in enumerate(members):
                    end = start + linear.out_features
                    # an instance attribute shadows the method
                    linear.forward = self._by_small_products(
                        _packed_forward(linear, product, index, start, end)
                    )
                    swapped.append(linear)
                    bounds.append((start, end))
                    start = end
                smallest = min(m.weight.shape[0] * m.weight.shape[1] for m in members)
                self._live[id(members[0])] = _LiveUnit(members, product, bounds, smallest)
            yield
        finally:
            self._live = outer
            for linear in swapped:
                del linear.forward

    def outputs(self, members: tuple[nn.Linear, ...], x: torch.Tensor) -> list[torch.Tensor]:
        """Each of `members`' outputs for the input `x`, the bits calling each in turn gives (inside `active()`
        or not), from one product where they are a packed unit: a layer's Q/K/V (gate/up) without a module call
        and a forward closure per member."""
        unit = self._live.get(id(members[0]))
        rows = row_count(x)
        # where any member would take F.linear, each makes its own product, as its module call does
        if unit is None or unit.members != members or takes_plain(x, rows, unit.smallest_macs):
            return [m(x) for m in members]
        out = unit.product.whole(x, rows)
        return [out[..., start:end] for start, end in unit.bounds] if len(members) > 1 else [out]

    @contextmanager
    def column_products(self, one_row: bool = False) -> Iterator[None]:
        """Inside `active()`: a pass of several columns per row (speculative decoding's drafts and verification),
        whose rows must get the bits the one-column steps give them. A product of more than `SMALL_ROWS` rows runs
        `SMALL_ROWS` rows at a time (the kernel of a step's few rows, not the one torch takes for more); with
        `one_row` (a one-row batch, whose steps multiply one row) each row gets the bits it gets alone: a shape
        that sums several rows as it sums one keeps its whole product, the others run row by row."""
        self._columns, self._one_row = True, one_row
        try:
            yield
        finally:
            self._columns = self._one_row = False

    def _by_small_products(self, forward):
        """`forward`, in `SMALL_ROWS`-row pieces where a column pass multiplies more rows (`column_products`)."""

        def pieces(x: torch.Tensor) -> torch.Tensor:
            if self._columns and row_count(x) > SMALL_ROWS:
                return in_row_chunks(forward, x, SMALL_ROWS)
            return forward(x)

        return pieces

    def _row_rule(self, product, shape: tuple[int, int], bias: bool, packed: bool):
        """A unit's rule: whether its product of `rows` rows runs row by row now (only inside
        `column_products` for a one-row batch, where the shape sums several rows unlike one: probed once per
        shape)."""

        def splits(rows: int) -> bool:
            if not self._one_row or rows < 2:
                return False
            key = (shape, bias, packed, torch.get_num_threads())
            if key not in self._rows_alike:
                self._rows_alike[key] = rows_alike(product, shape[1], torch.bfloat16)
            return not self._rows_alike[key]

        return splits


def _plain_product(linear: nn.Linear):
    weight, bias = linear.weight, linear.bias
    return lambda x: F.linear(x, weight, bias)


def _split_forward(product, splits):
    def forward(x: torch.Tensor) -> torch.Tensor:
        return row_by_row(product, x) if splits(row_count(x)) else product(x)

    return forward


class _SharedProduct:
    """A unit's packed product. With siblings, the first of them (Q, gate: the one a layer calls first) computes it
    and keeps it with its input; a later sibling called with that very input reads its slice (the last one lets
    it go), and one called with any other input computes its own product with `F.linear`, the same bits."""

    def __init__(self, packed: torch.Tensor, bias: torch.Tensor | None, count: int) -> None:
        self.packed, self.bias, self.count = packed, bias, count
        self.splits = lambda rows: False  # PackedLinears._row_rule: whether to multiply row by row now
        self.input: torch.Tensor | None = None
        self.output: torch.Tensor | None = None

    def product(self, x: torch.Tensor) -> torch.Tensor:
        return packed_product(x, self.packed, self.bias)

    def whole(self, x: torch.Tensor, rows: int) -> torch.Tensor:
        """The unit's product of `x` (`rows` rows), row by row where `splits` says so; nothing kept."""
        return row_by_row(self.product, x) if self.splits(rows) else self.product(x)

    def compute(self, x: torch.Tensor) -> torch.Tensor:
        out = self.whole(x, row_count(x))
        if self.count > 1:
            self.input, self.output = x, out
        return out

    def kept_for(self, x: torch.Tensor, last: bool) -> torch.Tensor | None:
        out = self.output if x is self.input else None
        if last:
            self.input = self.output = None
        return out


@dataclass(frozen=True)
class _LiveUnit:
    """A packed unit inside `PackedLinears.active()`: its members, their product, each member's columns of it,
    and the smallest member's multiply-adds per row (below torch's oneDNN threshold, that member takes F.linear)."""

    members: tuple[nn.Linear, ...]
    product: _SharedProduct
    bounds: list[tuple[int, int]]
    smallest_macs: int


def _packed_forward(linear: nn.Linear, product: _SharedProduct, index: int, start: int, end: int):
    weight, bias = linear.weight, linear.bias
    macs_per_row = weight.shape[0] * weight.shape[1]
    last = index == product.count - 1

    def forward(x: torch.Tensor) -> torch.Tensor:
        # where torch's own product of this linear alone would not run on oneDNN, neither does it here
        if takes_plain(x, row_count(x), macs_per_row):
            return F.linear(x, weight, bias)
        if index == 0:
            out = product.compute(x)
        else:
            out = product.kept_for(x, last)
            if out is None:
                return F.linear(x, weight, bias)
        return out[..., start:end] if product.count > 1 else out

    return forward
