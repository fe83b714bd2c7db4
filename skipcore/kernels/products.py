"""The products of the engine's passes on the CPU: the same bits as the modules' own, sooner. Three kinds: bfloat16
linears through oneDNN with their weights prepacked once (`PackedLinears`, below), the float32 LM head over
blocks of its vocabulary (`head_logits`, at the end), and each module called where neither applies
(`module_outputs`).

bfloat16 linears. On a CPU where torch sends a bfloat16 `F.linear` to oneDNN (AVX-512 or AMX; `torch.ops.mkldnn.
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

Only the engine's own passes run packed: each hands its layers its products (`PackedLinears.for_pass`, a layer
argument like its attention), which a lean layer calls and a module layer reaches through a torch function mode
around its forward (`PassProducts.intercepting`, this thread's calls only). No module is changed, so `generate()`,
training and anything else see the model's modules as loaded; products below torch's own oneDNN threshold,
outside inference (autograd) or in another dtype run `F.linear` as before.

One row is a case apart. oneDNN multiplies a single row by its own kernel, which for some shapes sums in another
order than the kernel for several rows (SmolLM2's down projection, 1536 wide: a row of a 2-9-row product differs
from the same row alone in 10-65% of random draws, `python scripts/bf16_cpu_probes.py rows`; every other SmolLM2
shape agrees). A batch of one row decodes one row per step, as `generate()` does, but a speculative verification
multiplies its k + 1 columns at once, so those columns would not get the bits the one-row steps give (and the
drafts' tokens part from full depth's at near-ties). In a one-row batch's column pass (`for_pass(columns=True,
one_row=True)`) a product of several rows whose shape sums them unlike one row (probed once per shape) runs one
row at a time: each row its one-row bits, for the price of reading that weight again per row (the other products
stay whole).

The float32 LM head, over blocks of its vocabulary. A decode step multiplies a few rows (the batch; a speculative
pass's k + 1 columns per row; the lens's read-outs) by the head, the largest matrix a small model has (SmolLM2-135M's is 113 MB). With more than one
row torch's float32 CPU kernel (MKL) reads a vocabulary-sized weight more slowly than a few-MB one, so the
product runs over blocks of `BLOCK_ROWS` vocabulary rows instead (the rates: docs/results.md; `python
scripts/cpu_matmul_bandwidth.py --kernels linear,blocked` measures them). Each logit is still one dot product
over the hidden size summed in the same order, so the logits are the one product's bit for bit
(tests/kernels/test_head_product.py checks it wherever the tests run). A block of a few rows would not be: MKL takes
another path for a sliver of output features, so the remainder joins the last block instead of making its own.
One row takes the kernel's matrix-vector path, which gains nothing here; a GPU, another dtype or a product
that keeps gradients runs the plain module.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F
from torch.overrides import TorchFunctionMode

from skipcore.kernels.weight_state import weight_state

ONEDNN_MIN_MACS = 16 * 16 * 16  # torch sends a bfloat16 product to oneDNN only above this many multiply-adds
SIBLINGS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))  # linears a layer feeds the same input
# torch's bfloat16 product keeps one kernel for products of up to this many rows on the CPUs measured; above it an
# AMX Xeon's oneDNN takes another kernel, which sums a row in another order than a smaller product does (a row of a
# 33-200-row product differs from the same row in 8-row products on 2-199 of its outputs, SmolLM2's shapes)
SMALL_ROWS = 32
PASS_PRODUCTS = (
    "skipcore_products"  # the layer argument a pass hands its products in (`PackedLinears.for_pass`)
)
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
    its version), and the products a pass runs with them (`for_pass`).

    Siblings fed the same input (a layer's Q, K and V projections; gate and up) are packed as one matrix: the
    first of them called multiplies the input once by all, and each returns its own slice of the product. Each
    output is still one dot product summed in the same order, so the slices are the separate products' bit for
    bit (checked per shape, as for one linear); a decode step then makes fewer, larger products.

    Nothing here changes per pass: the packed weights are a cache of the weights (`refresh`), and what a pass
    asks of its products (a column pass's rules) is its own `PassProducts`, handed to its layers as an argument."""

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
        self.ready: dict[int, PackedUnit] = {}  # each packed unit, by its first member's id (`refresh`)
        self.member_of: dict[int, tuple[PackedUnit, int]] = {}  # a packed linear's unit and place, by its id
        self.ready_ids: frozenset[int] = frozenset()  # the packed linears' ids
        # each unit's member by its weight's id: what a module's `F.linear` call is matched by (`intercepting`)
        self.by_weight: dict[int, nn.Linear] = {id(m.weight): m for unit in self.units for m in unit}

    def packed(self, members: tuple[nn.Linear, ...]) -> tuple[torch.Tensor, torch.Tensor | None] | None:
        """The unit's packed weight and bias (its members' side by side), packed now if new or changed; None
        where its shape does not agree."""
        weights = [m.weight for m in members]
        if any(w.dtype != torch.bfloat16 or w.device.type != "cpu" for w in weights):
            return None
        unit = tuple(id(m) for m in members)
        key = weight_state(weights + [m.bias for m in members if m.bias is not None])
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

    def linears_of(self, module: nn.Module) -> frozenset[int]:
        """The ids of `module`'s linears that are members of a unit: those a pass's products serve."""
        return frozenset(
            id(m) for m in module.modules() if isinstance(m, nn.Linear) and id(m.weight) in self.by_weight
        )

    def refresh(self) -> None:
        """Every unit packed as its weights are now (a weight changed since, by an optimizer step or a merged
        adapter, is packed again), before a decode's passes: a unit left unpacked runs the plain product, the same
        bits. Idempotent, so two threads refreshing alike leave the same units."""
        ready = {}
        for members in self.units:
            held = self.packed(members)
            if held is None:
                continue
            packed, bias = held
            bounds, start = [], 0
            for m in members:
                bounds.append((start, start + m.out_features))
                start += m.out_features
            smallest = min(m.weight.shape[0] * m.weight.shape[1] for m in members)
            ready[id(members[0])] = PackedUnit(members, packed, bias, tuple(bounds), smallest)
        self.member_of = {id(m): (unit, i) for unit in ready.values() for i, m in enumerate(unit.members)}
        self.ready_ids = frozenset(self.member_of)
        self.ready = ready

    def for_pass(self, columns: bool = False, one_row: bool = False) -> PassProducts | None:
        """The products of one pass (`PassProducts`); `columns`: a pass of several columns per row (speculative
        decoding's drafts and verification), whose rows must get the bits the one-column steps give them, and
        `one_row` a one-row batch's. None where nothing is packed (another dtype or device, oneDNN switched off:
        torch's own product leaves oneDNN then, `torch.backends.mkldnn.flags`, and so do these)."""
        if not self.units or not torch.backends.mkldnn.enabled:
            return None
        return PassProducts(self, columns, one_row)

    def row_rule(self, product, shape: tuple[int, int], bias: bool, packed: bool, one_row: bool) -> bool:
        """Whether a product of several rows runs row by row in a one-row batch's column pass: where the shape
        sums several rows unlike one (probed once per shape and thread count)."""
        if not one_row:
            return False
        key = (shape, bias, packed, torch.get_num_threads())
        if key not in self._rows_alike:
            self._rows_alike[key] = rows_alike(product, shape[1], torch.bfloat16)
        return not self._rows_alike[key]


@dataclass(frozen=True)
class PackedUnit:
    """A packed unit: its members, their packed weight and bias side by side, each member's columns of the
    product, and the smallest member's multiply-adds per row (below torch's oneDNN threshold, that member takes
    F.linear)."""

    members: tuple[nn.Linear, ...]
    packed: torch.Tensor
    bias: torch.Tensor | None
    bounds: tuple[tuple[int, int], ...]
    smallest_macs: int

    def product(self, x: torch.Tensor) -> torch.Tensor:
        return packed_product(x, self.packed, self.bias)

    @property
    def shape(self) -> tuple[int, int]:
        return self.bounds[-1][1], self.members[0].in_features


class PassProducts:
    """The linear products of one pass, each the bits the module's own `F.linear` gives: packed where its unit is,
    the plain product elsewhere, by the pass's rules. A column pass (`columns`) multiplies more than `SMALL_ROWS`
    rows `SMALL_ROWS` at a time (the kernel of a step's few rows, not the one torch takes for more); in a one-row
    batch's (`one_row`) each row gets the bits it gets alone: a shape that sums several rows as it sums one keeps
    its whole product, the others run row by row.

    A lean layer asks for a unit's outputs (`outputs`); a module's forward is run inside `intercepting()`, where
    its `F.linear` calls on the model's weights come here. Made per pass and used by one thread."""

    def __init__(self, linears: PackedLinears, columns: bool, one_row: bool) -> None:
        self.linears, self.columns, self.one_row = linears, columns, one_row
        self._kept: tuple[int, torch.Tensor, torch.Tensor] | None = (
            None  # a unit's product for its later siblings
        )

    def outputs(self, members: tuple[nn.Linear, ...], x: torch.Tensor) -> list[torch.Tensor]:
        """Each of `members`' outputs for the input `x`, the bits calling each in turn gives, from one product where
        they are a packed unit: a layer's Q/K/V (gate/up) without a module call."""
        unit = self.linears.ready.get(id(members[0]))
        # where any member would take F.linear, each makes its own product, as its module call does
        if unit is None or unit.members != members or takes_plain(x, row_count(x), unit.smallest_macs):
            return [self.linear(m, x) for m in members]
        out = self._whole(unit, x)
        return [out[..., start:end] for start, end in unit.bounds] if len(members) > 1 else [out]

    def linear(self, linear: nn.Linear, x: torch.Tensor) -> torch.Tensor:
        """`linear(x)` as this pass multiplies it: in `SMALL_ROWS`-row pieces where a column pass has more."""
        if self.columns and row_count(x) > SMALL_ROWS:
            return in_row_chunks(lambda piece: self._member(linear, piece), x, SMALL_ROWS)
        return self._member(linear, x)

    def serves(self, linears: frozenset[int]) -> bool:
        """Whether a module whose unit members are `linears` (`PackedLinears.linears_of`) needs this pass's
        products: in a column pass wherever it has any (their rules split products), in a step only where one is
        packed (an unpacked product is the plain one)."""
        return bool(linears) and (self.columns or not linears.isdisjoint(self.linears.ready_ids))

    @contextmanager
    def intercepting(self) -> Iterator[None]:
        """Inside, the model's linears called as modules (`F.linear` on a unit's weight) run this pass's products;
        a torch function mode, so only this thread's calls, and nothing of the model's changes."""
        with _LinearCalls(self):
            yield

    def _whole(self, unit: PackedUnit, x: torch.Tensor) -> torch.Tensor:
        """The unit's product of `x`, row by row where the pass's rule says so."""
        split = (
            self.one_row
            and row_count(x) >= 2
            and self.linears.row_rule(unit.product, unit.shape, unit.bias is not None, True, self.one_row)
        )
        return row_by_row(unit.product, x) if split else unit.product(x)

    def _member(self, linear: nn.Linear, x: torch.Tensor) -> torch.Tensor:
        weight, bias = linear.weight, linear.bias
        unit, index = self.linears.member_of.get(id(linear), (None, 0))
        if (
            unit is None or unit.members[index] is not linear
        ):  # unpacked: the plain product, row by row where the pass's rule says so
            plain = _plain_product(linear)
            split = (
                self.one_row
                and row_count(x) >= 2
                and self.linears.row_rule(plain, tuple(weight.shape), bias is not None, False, self.one_row)
            )
            return row_by_row(plain, x) if split else plain(x)
        # where torch's own product of this linear alone would not run on oneDNN, neither does it here
        if takes_plain(x, row_count(x), weight.shape[0] * weight.shape[1]):
            return F.linear(x, weight, bias)
        count = len(unit.members)
        if index == 0:
            out = self._whole(unit, x)
            if count > 1:
                self._kept = (id(unit), x, out)
        else:
            kept = self._kept
            out = kept[2] if kept is not None and kept[0] == id(unit) and kept[1] is x else None
            if index == count - 1:
                self._kept = None
            if out is None:  # a sibling fed another input computes its own
                return F.linear(x, weight, bias)
        start, end = unit.bounds[index]
        return out[..., start:end] if count > 1 else out


def _plain_product(linear: nn.Linear):
    weight, bias = linear.weight, linear.bias
    return lambda x: F.linear(x, weight, bias)


class _LinearCalls(TorchFunctionMode):
    """`F.linear` on a weight of a packed model's units, run by a pass's products (`PassProducts.intercepting`);
    every other torch call as it is."""

    def __init__(self, products: PassProducts) -> None:
        super().__init__()
        self.products = products

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.linear and len(args) >= 2:
            linear = self.products.linears.by_weight.get(id(args[1]))
            bias = args[2] if len(args) > 2 else kwargs.get("bias")
            if linear is not None and args[1] is linear.weight and bias is linear.bias:
                return self.products.linear(linear, args[0])
        return func(*args, **kwargs)


def products_of(kwargs: dict):
    """The outputs function a lean layer calls for a unit of linears (`members`, `x`) -> their outputs: the pass's
    products (`PassProducts.outputs`) where its arguments hand them, else each module called (`module_outputs`)."""
    products = kwargs.get(PASS_PRODUCTS)
    return module_outputs if products is None else products.outputs


def module_outputs(members: tuple[nn.Module, ...], x: torch.Tensor) -> list[torch.Tensor]:
    """A unit of linears' outputs, each its module's own product (`nn.Linear.forward`'s one call, without the module
    call around it), where its pass hands no products; a linear with a hook on it, or its forward replaced (added
    after the engine took the layer: an ablation, a steering vector), is called as a module, so they run."""
    return [m(x) if _hooked(m) else F.linear(x, m.weight, m.bias) for m in members]


def _hooked(m: nn.Module) -> bool:
    return bool(m._forward_hooks or m._forward_pre_hooks) or "forward" in vars(m)


BLOCK_ROWS = 1024  # vocabulary rows per block: 2.4 MB of SmolLM2's float32 head, a few MB like a layer


def blocked(head: nn.Module, hidden: torch.Tensor) -> bool:
    """Whether `head_logits` splits this product: a plain float32 linear head on the CPU, larger than a block,
    over more than one row, outside autograd (a training step keeps one product and one backward)."""
    return (
        type(head) is nn.Linear
        and head.weight.device.type == "cpu"
        and head.weight.dtype == torch.float32
        and head.weight.shape[0] > BLOCK_ROWS
        and hidden.numel() > hidden.shape[-1]
        and not torch.is_grad_enabled()
    )


def block_sizes(rows: int) -> list[int]:
    """`BLOCK_ROWS` each, the remainder added to the last block (never a block of a few rows)."""
    sizes = [BLOCK_ROWS] * (rows // BLOCK_ROWS)
    sizes[-1] += rows % BLOCK_ROWS
    return sizes


def head_logits(head: nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    """`head(hidden)`, over vocabulary blocks where `blocked` says so."""
    if not blocked(head, hidden):
        return head(hidden)
    sizes = block_sizes(head.weight.shape[0])
    weights = head.weight.split(sizes)
    biases = head.bias.split(sizes) if head.bias is not None else [None] * len(sizes)
    return torch.cat([F.linear(hidden, w, b) for w, b in zip(weights, biases)], dim=-1)
