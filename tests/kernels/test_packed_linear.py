"""bfloat16 linears with prepacked oneDNN weights: the plain product's outputs bit for bit at every row count a
decode runs, only in the engine's passes (each with its own products, nothing of the model's changed), repacked
when a weight changes, and left to `F.linear` where they would not agree or where torch itself would not use
oneDNN."""

from __future__ import annotations

import threading

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from skipcore.kernels import products
from skipcore.kernels.products import (
    ONEDNN_MIN_MACS,
    SMALL_ROWS,
    PackedLinears,
    pack,
    packed_product,
    packing_applies,
)
from tests.helpers import PROMPTS, engine_for, hf_generate, padded

pytestmark = pytest.mark.skipif(
    not packing_applies(nn.Linear(8, 8).to(torch.bfloat16)),
    reason="this CPU's torch does not send bfloat16 products to oneDNN",
)


def test_packed_products_are_the_plain_products_bit_for_bit_at_every_row_count():
    """Over 2.6M outputs of SmolLM2-135M's shapes (a slice of its head), at every count of rows the packed product
    serves (up to `SMALL_ROWS`; more take the plain product, `takes_plain`): a product summed in another order
    (float32, rounded once) differs from the plain one on hundreds of them, so agreement here is the same order,
    not luck."""
    torch.manual_seed(0)
    differ = other_order_differ = outputs = 0
    for out_features, in_features in [(576, 576), (192, 576), (1536, 576), (576, 1536), (16384, 576)]:
        w = (torch.randn(out_features, in_features) * 0.05).bfloat16()
        b = torch.randn(out_features).bfloat16()
        packed = pack(w)
        for rows in (1, 2, 3, 5, 8, 16, SMALL_ROWS):
            x = torch.randn(rows, in_features).bfloat16()
            for bias in (None, b):
                want = F.linear(x, w, bias)
                differ += int((packed_product(x, packed, bias) != want).sum())
                outputs += want.numel()
            other_order_differ += int(((x.float() @ w.float().T).bfloat16() != F.linear(x, w)).sum())
        x = torch.randn(
            2, 3, in_features
        ).bfloat16()  # a (batch, columns, hidden) pass, and a strided last column
        assert torch.equal(packed_product(x, packed, b), F.linear(x, w, b))
        assert torch.equal(packed_product(x[:, -1], packed, b), F.linear(x[:, -1], w, b))
    assert outputs > 2_000_000 and differ == 0
    assert other_order_differ > 50


def _tiny_mlp() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 256), nn.SiLU(), nn.Linear(256, 64, bias=False)).to(torch.bfloat16)


@pytest.fixture
def counted(monkeypatch):
    calls = []

    def counting(x, packed, bias):
        calls.append(x.shape)
        return packed_product(x, packed, bias)

    monkeypatch.setattr(products, "packed_product", counting)
    return calls


def _ready(model: nn.Module, counted: list) -> PackedLinears:
    """The model's linears packed as an engine packs them before a decode (the shapes' probes not counted)."""
    packs = PackedLinears(model)
    packs.refresh()
    counted.clear()
    return packs


def test_packed_only_in_a_pass_s_products_and_the_same_outputs(counted):
    model = _tiny_mlp()
    x = torch.randn(3, 64).bfloat16()
    with torch.inference_mode():
        want = model(x)
        assert not counted
        packs = _ready(model, counted)
        with packs.for_pass().intercepting():
            got = model(x)
        assert len(counted) == 2 and torch.equal(got, want)
        model(x)  # outside a pass: the modules as loaded
    assert len(counted) == 2
    assert all("forward" not in vars(m) for m in model.modules())  # nothing of the model's was changed


def test_a_pass_in_one_thread_leaves_another_thread_s_calls_alone(counted):
    """No shared state changes per pass: while one thread's pass runs (here held inside its scope), the same
    model's linears called from another thread are its own modules', with no packed product; so an engine needs
    no lock for its products, and `generate()` beside a decode sees the model as loaded."""
    model = _tiny_mlp()
    x = torch.randn(3, 64).bfloat16()
    packs = _ready(model, counted)
    inside, release, seen = threading.Event(), threading.Event(), []

    def decode() -> None:
        with torch.inference_mode(), packs.for_pass(columns=True, one_row=True).intercepting():
            seen.append(model(x))
            inside.set()
            release.wait(30)
            seen.append(model(x))

    worker = threading.Thread(target=decode)
    worker.start()
    try:
        assert inside.wait(30)
        during = len(counted)
        with torch.inference_mode():
            here = model(x)
        assert len(counted) == during  # this thread's products are the plain ones
    finally:
        release.set()
        worker.join(30)
    assert len(counted) > during  # the held pass ran packed after
    with torch.inference_mode():
        assert torch.equal(here, model(x)) and all(torch.equal(s, here) for s in seen)


def test_autograd_small_products_and_other_dtypes_run_the_plain_product(counted):
    model = _tiny_mlp()
    small = nn.Linear(16, 16).to(torch.bfloat16)  # 1 x 16 x 16 multiply-adds: torch keeps it off oneDNN too
    assert ONEDNN_MIN_MACS >= 16 * 16
    packs = _ready(model, counted)
    with packs.for_pass().intercepting():
        y = model(torch.randn(2, 64).bfloat16().requires_grad_())
        y.sum().backward()  # a training step through a pass still has its gradients
    assert not counted and model[0].weight.grad is not None
    small_packs = _ready(small, counted)
    with torch.inference_mode(), small_packs.for_pass().intercepting():
        small(torch.randn(1, 16).bfloat16())
    assert not counted
    assert not packing_applies(nn.Linear(8, 8))  # float32: MKL's product, not oneDNN's
    assert PackedLinears(nn.Linear(8, 8)).units == [] and PackedLinears(nn.Linear(8, 8)).for_pass() is None


@pytest.mark.parametrize(
    "change",
    [
        lambda m: m[0].weight.mul_(2),  # an optimizer step, load_state_dict
        lambda m: m[0].weight.data.mul_(2),  # peft's merge, a hand-written update: the version does not move
        lambda m: m[0].weight.data[3].zero_(),  # one unit of a layer knocked out, an ablation
        lambda m: m[0].weight.data.copy_(m[0].weight.data.flip(0)),  # units (heads) reordered: the same sum
        lambda m: m[0].bias.add_(1),
        lambda m: m[0].bias.data.add_(1),
    ],
    ids=[
        "weight",
        "weight.data",
        "one row through .data",
        "rows reordered through .data",
        "bias",
        "bias.data",
    ],
)
def test_a_weight_changed_in_place_is_packed_again(counted, change):
    """The packed copy follows the weights and biases however they were written: through `.data` the parameter's
    version counter never moved, and the copy served the old weights."""
    model = _tiny_mlp()
    x = torch.randn(2, 64).bfloat16()
    packs = _ready(model, counted)
    with torch.inference_mode(), packs.for_pass().intercepting():
        before = model(x)
    with torch.no_grad():
        change(model)
    packs.refresh()  # as the engine does before each decode
    with torch.inference_mode():
        want = model(x)
        with packs.for_pass().intercepting():
            after = model(x)
    assert torch.equal(after, want) and not torch.equal(after, before)


def test_a_shape_whose_packed_product_disagrees_is_left_to_the_plain_product(monkeypatch):
    model = _tiny_mlp()
    x = torch.randn(3, 64).bfloat16()
    with torch.inference_mode():
        want = model(x)
    monkeypatch.setattr(products, "packed_product", lambda x, packed, bias: torch.zeros(1))
    packs = PackedLinears(model)
    packs.refresh()
    assert not packs.ready
    with torch.inference_mode():
        with packs.for_pass().intercepting():
            assert torch.equal(model(x), want)
        with packs.for_pass(columns=True, one_row=True).intercepting():
            assert torch.equal(model(x), want)


def test_a_forward_replaced_on_the_instance_is_kept():
    model = _tiny_mlp()
    hooked = model[0].forward = lambda x: x  # as accelerate's hooks replace it
    packs = PackedLinears(model)
    packs.refresh()
    assert all(model[0] not in unit for unit in packs.units)
    x = torch.randn(2, 64).bfloat16()
    with torch.inference_mode(), packs.for_pass().intercepting():
        assert model[0].forward is hooked and torch.equal(model[0](x), x)
    assert model[0].forward is hooked


@pytest.mark.parametrize("family", ["llama", "opt"])
def test_the_engine_in_bfloat16_runs_packed_and_stays_generates(model_dirs, family, counted):
    eng = engine_for(model_dirs, family, "sdpa", dtype="bfloat16")
    res = eng.generate(PROMPTS, max_new_tokens=12)
    assert counted  # the tiny models' larger products ran packed
    ref = hf_generate(eng, PROMPTS, 12, do_sample=False)
    assert torch.equal(padded(res.token_ids, eng.pad_id, ref.shape[1]), ref)


class _Block(nn.Module):
    """An attention's projections and a gated MLP, called as transformers' layers call them."""

    def __init__(self, width: int = 64, bias: bool = False) -> None:
        super().__init__()
        self.q_proj = nn.Linear(width, width, bias=bias)
        self.k_proj = nn.Linear(width, width // 4, bias=bias)
        self.v_proj = nn.Linear(width, width // 4, bias=bias)
        self.gate_proj = nn.Linear(width, 3 * width, bias=bias)
        self.up_proj = nn.Linear(width, 3 * width, bias=bias)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        return q, k, v, F.silu(self.gate_proj(x)) * self.up_proj(x)


@pytest.mark.parametrize("bias", [False, True])
def test_siblings_make_one_product_and_each_reads_its_own_outputs(counted, bias):
    torch.manual_seed(0)
    block = _Block(bias=bias).to(torch.bfloat16)
    packs = PackedLinears(block)
    assert [len(unit) for unit in packs.units] == [3, 2]
    x = torch.randn(2, 3, 64).bfloat16()
    packs.refresh()
    with torch.inference_mode():
        want = block(x)
        with packs.for_pass().intercepting():
            counted.clear()
            got = block(x)
            assert len(counted) == 2  # Q, K and V in one product, gate and up in another
            alone = block.k_proj(x + 1)  # a sibling fed another input computes its own
    for g, w in zip(got, want, strict=True):
        assert torch.equal(g, w)
    assert torch.equal(alone, F.linear(x + 1, block.k_proj.weight, block.k_proj.bias))


@pytest.mark.parametrize("bias", [False, True])
def test_a_units_outputs_come_from_one_product_with_each_members_bits(counted, bias):
    """`outputs` gives what calling each member gives, packed or not yet, at row counts where every member runs
    packed (one product per unit) and where a small member takes F.linear (its own product)."""
    torch.manual_seed(0)
    block = _Block(bias=bias).to(torch.bfloat16)
    packs = PackedLinears(block)
    units = [(block.q_proj, block.k_proj, block.v_proj), (block.gate_proj, block.up_proj)]
    with torch.inference_mode():
        for rows in (1, 3, 8):
            x = torch.randn(rows, 1, 64).bfloat16()
            want = [m(x) for unit in units for m in unit]
            not_yet = PackedLinears(block).for_pass()  # no unit packed yet
            unpacked = sum((not_yet.outputs(u, x) for u in units), [])
            assert all(torch.equal(g, w) for g, w in zip(unpacked, want, strict=True))
            packs.refresh()
            products = packs.for_pass()
            counted.clear()
            got = sum((products.outputs(u, x) for u in units), [])
            if rows == 8:  # every member above oneDNN's threshold: one product per unit
                assert len(counted) == 2
            assert len(got) == 5 and all(torch.equal(g, w) for g, w in zip(got, want, strict=True))


def test_siblings_of_other_input_widths_stay_apart():
    block = _Block().to(torch.bfloat16)
    block.v_proj = nn.Linear(32, 16).to(torch.bfloat16)
    assert sorted(len(unit) for unit in PackedLinears(block).units) == [1, 1, 1, 2]


@pytest.mark.filterwarnings("ignore:TF32 acceleration on top of oneDNN")  # torch's flags() says it on any CPU
def test_with_onednn_switched_off_the_plain_product_runs(counted):
    model = _tiny_mlp()
    packs = _ready(model, counted)
    with torch.inference_mode(), torch.backends.mkldnn.flags(enabled=False):
        assert packs.for_pass() is None and packs.for_pass(columns=True, one_row=True) is None
        model(torch.randn(2, 64).bfloat16())
        assert not counted


def test_in_a_one_row_column_pass_each_row_gets_its_one_row_bits(counted):
    """A one-row batch's multi-column pass must give each column the bits of the one-row step it stands for. On
    SmolLM2's MLP shapes, in a one-row batch's column pass every row of a 2-9-row product is that row's product
    alone (on this CPU the 1536-wide down projection sums several rows in another order, so it runs row by row);
    a shape that sums rows alike stays one product; in any other pass, every product is whole."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(576, 1536, bias=False), nn.Linear(1536, 576, bias=False)).bfloat16()
    packs = _ready(model, counted)
    columns, step = packs.for_pass(columns=True, one_row=True), packs.for_pass()
    whole_or_split = []
    with torch.inference_mode():
        for rows in range(2, 10):
            for layer in model:
                x = torch.randn(rows, layer.in_features).bfloat16()
                with step.intercepting():
                    alone = torch.cat([layer(row) for row in x.split(1)])
                with columns.intercepting():
                    layer(x)  # the first asks the shape once (random rows through the same product)
                    counted.clear()
                    got = layer(x)
                    whole_or_split.append(len(counted) == rows)
                assert torch.equal(got, alone), (rows, layer)
                assert len(counted) in (1, rows)
                (unit_out,) = columns.outputs((layer,), x)  # a unit's one call splits alike
                assert torch.equal(unit_out, alone), (rows, layer)
                counted.clear()
                with step.intercepting():
                    layer(x)
                assert len(counted) == 1
    # the same shape is split at every row count or at none
    assert whole_or_split[0::2] in ([True] * 8, [False] * 8) and whole_or_split[1::2] in (
        [True] * 8,
        [False] * 8,
    )


def test_a_product_of_more_rows_than_a_step_has_is_the_plain_one(counted):
    """A prefill's many rows: torch's own kernel for that many rows (on an AMX Xeon another kernel than a few
    rows', summing rows in another order), so a prefill is `generate()`'s bit for bit."""
    model = _tiny_mlp()
    x = torch.randn(SMALL_ROWS + 8, 64).bfloat16()
    with torch.inference_mode():
        want = model(x)
        with _ready(model, counted).for_pass().intercepting():
            got = model(x)
    assert torch.equal(got, want) and not counted


def test_in_a_column_pass_a_large_product_runs_in_a_step_s_pieces(counted):
    """A verification's rows (batch x (k + 1) columns) beyond `SMALL_ROWS`: the product runs `SMALL_ROWS` rows at
    a time, the kernel a decode step's few rows get, so each row has its step's bits."""
    model = _tiny_mlp()
    x = torch.randn(2 * SMALL_ROWS + 5, 64).bfloat16()
    packs = _ready(model, counted)
    with torch.inference_mode():
        with packs.for_pass().intercepting():
            want = torch.cat([model(piece) for piece in x.split(SMALL_ROWS)])
        with packs.for_pass(columns=True).intercepting():
            counted.clear()
            got = model(x)
    assert torch.equal(got, want)
    assert counted and max(shape[0] for shape in counted) <= SMALL_ROWS
