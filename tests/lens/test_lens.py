"""The layer lens against generate's own traces: at full depth its last layer is generate's log-probability
exactly, under a skip schedule `ran` is the trace's layer_mask, teacher forcing reproduces an uncached
recomputation, agreement counts what it says, and the files, command and figures hold what they show."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest
import torch

from skipcore.decode.engine import SkipEngine
from skipcore.decode.forward import column_layer_sets, skip_forward
from skipcore.errors import UserError
from skipcore.lens import (
    LENS_COLUMNS,
    agreement,
    compare_with_full_depth,
    layer_lens,
    layer_summary,
    read_lens,
    write_lens,
)
from skipcore.lens.forcing import forced_tokens
from skipcore.plots.lens import STATS, agreement_figure, layer_summary_figure, lens_heatmap
from skipcore.policies import AdaptivePolicy, CalmPolicy, SpeculativePolicy
from skipcore.schedule import Schedule
from skipcore.traces import TraceSchemaError
from tests.helpers import PROMPTS, engine_for

T = 10


@pytest.fixture(scope="module")
def opt(model_dirs) -> SkipEngine:
    return engine_for(model_dirs, attn="sdpa")


def final_rows(table: pd.DataFrame) -> pd.DataFrame:
    return table[table["layer"] == table["layer"].max()].sort_values(["sample", "step"], ignore_index=True)


def live(trace: pd.DataFrame) -> pd.DataFrame:
    return trace[~trace["finished"]].sort_values(["sample", "step"], ignore_index=True)


def masks(table: pd.DataFrame) -> pd.Series:
    """Each token's `ran` column as a layer_mask string."""
    t = table.sort_values(["sample", "step", "layer"])
    return (
        t.groupby(["sample", "step"])["ran"]
        .agg(lambda r: "".join("1" if x else "0" for x in r))
        .reset_index(drop=True)
    )


# -- the lens against generate -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("family", "dtype"),
    [
        ("opt", "float32"),
        ("opt-proj", "float32"),
        ("gpt2", "float32"),
        ("llama", "float32"),
        ("llama", "bfloat16"),
        ("qwen3", "bfloat16"),  # sliding layers: the replay reads their window as the decode does
    ],
)
def test_full_depth_last_layer_is_generates_logprob_exactly(model_dirs, family, dtype):
    eng = engine_for(model_dirs, family, attn="sdpa", dtype=dtype)
    ref = eng.generate(PROMPTS, None, T, batch_size=2)
    lens = layer_lens(eng, PROMPTS, None, T, batch_size=2)
    last, tr = final_rows(lens.table), live(ref.trace)
    assert lens.token_ids == ref.token_ids
    assert len(lens.table) == len(tr) * eng.num_layers
    # the replay runs the decode's own operations on the same shapes: bit for bit, not just close
    assert np.array_equal(last["logprob"].to_numpy(), tr["logprob"].to_numpy())
    assert (last["top_token_id"] == tr["token_id"]).all()  # greedy: the final read-out's top is the token
    assert (last["kl_to_final"] == 0).all() and lens.table["ran"].all()


def test_full_depth_read_outs_equal_transformers_hidden_states(model_dirs):
    """Every layer's read-out, not just the last: the logit lens from transformers' own forward pass."""
    eng = engine_for(model_dirs, "opt", attn="sdpa")
    lens = layer_lens(eng, PROMPTS[:1], None, T)
    ids = eng.tokenizer(PROMPTS[:1], return_tensors="pt")["input_ids"]
    gen = torch.tensor([lens.token_ids[0]])
    P, L = ids.shape[1], eng.num_layers
    with torch.no_grad():
        out = eng.model(torch.cat([ids, gen[:, :-1]], 1), output_hidden_states=True)
    for layer in range(L):
        h = out.hidden_states[layer + 1][0, P - 1 :]
        with torch.no_grad():  # the last hidden state transformers returns is already normed
            logits = eng.model.lm_head(h if layer == L - 1 else eng.adapter.final_hidden(h))
        logp = torch.log_softmax(logits.float(), -1)
        rows = lens.table[lens.table["layer"] == layer].sort_values("step")
        want = logp.gather(1, gen[0, :, None]).squeeze(1).numpy()
        np.testing.assert_allclose(rows["logprob"], want, rtol=1e-4, atol=1e-5)
        assert (rows["top_token_id"].to_numpy() == logp.argmax(-1).numpy()).all()


@pytest.mark.parametrize("mode", ["skip", "exit", "middle"])
def test_skip_schedule_ran_is_the_traces_layer_mask(opt, mode):
    sched = Schedule(opt.num_layers, "linear", mode, max_layers=6, min_layers=2, warmup_layers=1)
    ref = opt.generate(PROMPTS, sched, T, batch_size=2)
    lens = layer_lens(opt, PROMPTS, sched, T, batch_size=2)
    tr = live(ref.trace)
    assert tr["num_layers_run"].nunique() > 2  # the schedule really skipped, by several budgets
    assert (masks(lens.table) == tr["layer_mask"]).all()
    assert np.array_equal(final_rows(lens.table)["logprob"].to_numpy(), tr["logprob"].to_numpy())


def test_skipped_layers_leave_the_read_out_unchanged(opt):
    sched = Schedule(opt.num_layers, "constant", "skip", max_layers=3, min_layers=3, warmup_layers=1)
    t = layer_lens(opt, PROMPTS, sched, T).table.sort_values(["sample", "step", "layer"], ignore_index=True)
    below = t.groupby(["sample", "step"])[["top_prob", "kl_to_final", "entropy", "p_generated"]].shift(1)
    skipped = ~t["ran"] & (t["layer"] > 0)
    assert skipped.sum() > 0
    pd.testing.assert_frame_equal(t.loc[skipped, below.columns], below[skipped])
    assert t.loc[~t["ran"], "residual_cos"].isna().all()
    assert t.loc[t["ran"], "residual_cos"].between(-1 - 1e-5, 1 + 1e-5).all()
    ran = t.loc[t["ran"] & (t["step"] >= 1), "layer"].unique()
    assert sorted(ran) == [0, 4, 5]  # warmup layer 0, then the top two


def test_calm_ran_is_each_tokens_exit_and_logprob_matches(opt):
    """CALM exits per row: the replay runs the batch's layers with exited rows frozen (their K/V propagated).
    Its head sees the whole batch where CALM's sees the rows still running, so the last bits can differ."""
    full = layer_lens(opt, PROMPTS, None, T).table  # a threshold that some tokens reach early, some never
    middle = full[full["layer"].between(1, opt.num_layers - 2)]
    policy = CalmPolicy(threshold=float(middle["top_prob"].median()), min_layers=2)
    ref = opt.generate(PROMPTS, policy, T)
    lens = layer_lens(opt, PROMPTS, policy, T)
    tr = live(ref.trace)
    assert tr["num_layers_run"].nunique() > 1
    assert (masks(lens.table) == tr["layer_mask"]).all()
    np.testing.assert_allclose(final_rows(lens.table)["logprob"], tr["logprob"], rtol=1e-5, atol=1e-5)


def test_adaptive_ran_is_the_traces_layer_mask(opt):
    policy = AdaptivePolicy(min_layers=2, threshold=0.0, drop=1)
    ref = opt.generate(PROMPTS, policy, T)
    lens = layer_lens(opt, PROMPTS, policy, T)
    assert (masks(lens.table) == live(ref.trace)["layer_mask"]).all()


def test_read_out_columns_are_distributions(opt):
    t = layer_lens(opt, PROMPTS, None, T, top_k=3).table
    assert list(t.columns) == list(LENS_COLUMNS)
    assert t[["top_prob", "p_generated"]].stack().between(0, 1).all()
    assert (t["p_generated"] <= t["top_prob"] + 1e-7).all()
    np.testing.assert_allclose(np.exp(t["logprob"]), t["p_generated"], rtol=1e-6)
    assert (t["kl_to_final"] >= 0).all() and (t["entropy"] >= 0).all()
    top = [json.loads(x) for x in t["topk"]]
    assert all(len(k) == 3 for k in top)
    assert [k[0][0] for k in top] == t["top_token_id"].tolist()
    assert all(k[0][2] >= k[1][2] >= k[2][2] for k in top)


# -- teacher forcing and agreement ---------------------------------------------------------------------------
def test_teacher_forcing_equals_an_uncached_recomputation(opt):
    sched = Schedule(opt.num_layers, "linear", "skip", max_layers=6, min_layers=2, warmup_layers=1)
    cmp = compare_with_full_depth(opt, PROMPTS, sched, T)
    assert cmp.path.token_ids == cmp.full.token_ids  # the path was fed full depth's output
    enc = opt.tokenizer(PROMPTS, return_tensors="pt", padding=True)
    P = enc["input_ids"].shape[1]
    gen = torch.tensor([ids + [opt.pad_id] * (T - len(ids)) for ids in cmp.full.token_ids])
    ids = torch.cat([enc["input_ids"], gen[:, :-1]], 1)
    attn = torch.cat([enc["attention_mask"], torch.ones_like(gen[:, :-1])], 1)
    with torch.no_grad():
        ref = skip_forward(opt.adapter, ids, attn, column_layer_sets(P, ids.shape[1], sched.layer_sets(T)))
    logp = torch.log_softmax(ref[:, P - 1 :].float(), -1)  # column P-1+s predicts token s
    last = final_rows(cmp.path.table)
    rows, steps = (torch.from_numpy(last[c].to_numpy(copy=True)) for c in ("sample", "step"))
    want = (
        logp[rows, steps]
        .gather(1, torch.from_numpy(last["token_id"].to_numpy(copy=True))[:, None])
        .squeeze(1)
    )
    np.testing.assert_allclose(last["logprob"], want.numpy(), rtol=1e-4, atol=1e-5)
    # agreement: the uncached path's own top token against full depth's token, over decode steps
    agree = logp[rows, steps].argmax(-1).numpy() == last["token_id"].to_numpy()
    decode = (steps >= 1).numpy()
    assert cmp.agreement.overall == pytest.approx(agree[decode].mean())
    assert cmp.agreement.tokens == int(decode.sum())
    assert cmp.agreement.overall < 1  # a random model does not survive skipping: the count is not trivial


def test_agreement_per_budget_and_step_add_up(opt):
    sched = Schedule(opt.num_layers, "linear", "skip", max_layers=6, min_layers=2, warmup_layers=1)
    a = compare_with_full_depth(opt, PROMPTS, sched, T, batch_size=2).agreement
    by_budget, by_step = a.by_budget, a.by_step
    assert by_budget["tokens"].sum() == by_step["tokens"].sum() == a.tokens
    assert (by_budget["agreement"] * by_budget["tokens"]).sum() / a.tokens == pytest.approx(a.overall)
    assert set(by_budget["num_layers_run"]) == {len(s) for s in sched.layer_sets(T)[1:]}
    assert 0 not in set(by_step["step"])


def test_full_depth_agrees_with_itself(opt):
    a = compare_with_full_depth(opt, PROMPTS, None, T).agreement
    assert a.overall == 1.0 and a.tokens > 0


def test_one_full_depth_lens_serves_several_policies(opt):
    full = layer_lens(opt, PROMPTS, None, T)
    sched = Schedule(opt.num_layers, "constant", "skip", 3, 3)
    shared = compare_with_full_depth(opt, PROMPTS, sched, T, full=full)
    fresh = compare_with_full_depth(opt, PROMPTS, sched, T)
    assert shared.full is full and shared.agreement.overall == fresh.agreement.overall
    with pytest.raises(UserError, match="full-depth lens of the same prompts"):
        compare_with_full_depth(opt, PROMPTS, sched, T, full=shared.path)
    # as many prompts, other ones (or the same in another order): the agreement was with another text's tokens
    for others in ([*PROMPTS[1:], PROMPTS[0]], [p + " more" for p in PROMPTS]):
        with pytest.raises(UserError, match="full-depth lens of the same prompts, in the same order"):
            compare_with_full_depth(opt, others, sched, T, full=full)


@pytest.mark.parametrize("full", ["x", 5, {"mode": "full"}])
def test_a_full_lens_of_the_wrong_kind_is_refused_naming_it(opt, full):
    from skipcore.errors import ArgumentTypeError

    with pytest.raises(ArgumentTypeError, match="full must be a full-depth LensResult") as e:
        compare_with_full_depth(opt, PROMPTS, None, T, full=full)
    assert e.value.field == "full"


def test_a_full_lens_made_by_another_model_or_precision_is_refused(model_dirs, opt):
    """`full=` a full-depth lens of another model was taken: the agreement "with full depth" was with another model's
    output (0.84 where its own full depth gives 0.95). The model, dtype, cache dtype and fused step must be this
    engine's."""
    import dataclasses

    sched = Schedule(opt.num_layers, "constant", "skip", 3, 3)
    full = layer_lens(opt, PROMPTS, None, T)
    elsewhere = dataclasses.replace(full, metadata={**full.metadata, "model": "/models/another"})
    with pytest.raises(
        UserError, match=r"^`full` was made by another engine \(model '/models/another' where"
    ) as e:
        compare_with_full_depth(opt, PROMPTS, sched, T, full=elsewhere)
    assert e.value.field == "full"
    half = engine_for(model_dirs, attn="sdpa", dtype="bfloat16")
    with pytest.raises(UserError, match=r"dtype 'float32' where this engine's is 'bfloat16'"):
        compare_with_full_depth(half, PROMPTS, sched, T, full=full)
    assert compare_with_full_depth(opt, PROMPTS, sched, T, full=full).full is full  # its own: taken


def test_a_full_lens_of_another_length_is_said_as_such(opt):
    """It said 'teacher tokens of prompt 0 stop after 4 of 6 tokens without EOS', blaming the prompt's tokens."""
    full = layer_lens(opt, PROMPTS, None, 4)
    with pytest.raises(
        UserError, match="`full` was made with max_new_tokens 4, and this comparison asks for 6"
    ) as e:
        compare_with_full_depth(
            opt, PROMPTS, Schedule(opt.num_layers, "constant", "skip", 3, 3), 6, full=full
        )
    assert e.value.fields == ("full", "max_new_tokens")


def test_agreement_refuses_a_lens_on_its_own_decode(opt):
    lens = layer_lens(opt, PROMPTS, Schedule(opt.num_layers, "constant", "skip", 3, 3), T)
    with pytest.raises(UserError, match="teacher-forced"):
        agreement(lens)


@pytest.mark.parametrize(
    "rows, match",
    [
        ([[5, 6]], "stop after 2 of 4 tokens without EOS"),
        ([[5, 6, 7, 8, 9]], "5 long, more than max_new_tokens"),
        ([[]], "empty"),
        ([[5, 6, 100, 2]], r"hold 100, not a token id of this model's \(a whole number in \[0, 100\)\)"),
        ([[5, -1, 2]], "hold -1, not a token id"),
        ([[3.5, 6, 7, 8]], "hold 3.5, not a token id"),
        ([["5", 6, 7, 8]], "hold '5', not a token id"),
        (["5678"], "teacher tokens of prompt 0 are str, not a list of token ids"),
        ([5], "teacher tokens of prompt 0 are int, not a list of token ids"),
    ],
)
def test_forced_tokens_refuse_rows_the_decode_cannot_follow(rows, match):
    with pytest.raises(UserError, match=match) as info:
        forced_tokens(rows, 4, [2], 1, 100)
    assert "tokens" in info.value.fields  # named for a front end to put beside the argument


def test_forced_tokens_pad_rows_ended_by_eos():
    table = forced_tokens([[5, 2], [5, 6, 7, 8]], 4, [2], 1, 100)
    assert table.tolist() == [[5, 2, 1, 1], [5, 6, 7, 8]]
    rows = [
        torch.tensor([5, 2]),
        np.array([5.0, 6.0, 7.0, 99.0]),
    ]  # a tensor's and an array's rows, whole floats
    assert forced_tokens(rows, 4, [2], 1, 100).tolist() == [[5, 2, 1, 1], [5, 6, 7, 99]]


def test_bad_lens_requests_are_refused(opt):
    with pytest.raises(UserError, match="token lists given for"):
        layer_lens(opt, PROMPTS, None, T, tokens=[[1]])
    rows = opt.model.get_input_embeddings().num_embeddings
    with pytest.raises(UserError, match=f"teacher tokens of prompt 1 hold {rows}, not a token id"):
        layer_lens(opt, PROMPTS, None, T, tokens=[[3] * T, [rows] * T, [3] * T])  # past the embeddings
    with pytest.raises(UserError, match="top_k"):
        layer_lens(opt, PROMPTS, None, T, top_k=0)
    draft = Schedule(opt.num_layers, "constant", "skip", 3, 3)
    with pytest.raises(
        UserError, match="every kept token comes from a full-depth verification pass: read full"
    ):
        layer_lens(opt, PROMPTS, SpeculativePolicy(draft, draft_tokens=2), T)


@pytest.mark.parametrize(("top_k", "said"), [(2.5, "2.5"), (True, "True"), ("3", "'3'"), (0, "0")])
def test_a_top_k_that_is_no_count_is_refused_before_the_decode(opt, monkeypatch, top_k, said):
    """2.5 and True failed in torch's topk after the whole decode; "3" failed comparing text with a number."""

    def decode(*args, **kw):
        raise AssertionError("the decode ran before the refusal")

    monkeypatch.setattr(opt, "decode_prompts", decode)
    with pytest.raises(UserError, match=rf"^top_k must be a whole number >= 1, got {re.escape(said)}$") as e:
        layer_lens(opt, PROMPTS, None, T, top_k=top_k)
    assert e.value.field == "top_k"


def test_a_top_k_past_the_vocabulary_is_refused_before_the_decode(opt, monkeypatch):
    """It was cut to the vocabulary's size without a word (metadata said the count asked for)."""
    vocab = opt.adapter.shapes.vocab_size

    def decode(*args, **kw):
        raise AssertionError("the decode ran before the refusal")

    monkeypatch.setattr(opt, "decode_prompts", decode)
    with pytest.raises(
        UserError, match=rf"^top_k {vocab + 1} is more than the model's {vocab} vocabulary"
    ) as e:
        layer_lens(opt, PROMPTS, None, T, top_k=vocab + 1)
    assert e.value.field == "top_k"


def test_a_top_k_of_numpy_or_a_whole_float_is_the_count(opt):
    assert layer_lens(opt, PROMPTS[:1], None, 3, top_k=np.int64(2)).metadata["lens"]["top_k"] == 2
    assert layer_lens(opt, PROMPTS[:1], None, 3, top_k=2.0).metadata["lens"]["top_k"] == 2


# -- summaries, files, figures -------------------------------------------------------------------------------
def test_layer_summary(opt):
    sched = Schedule(opt.num_layers, "constant", "skip", max_layers=3, min_layers=3, warmup_layers=1)
    t = layer_lens(opt, PROMPTS, sched, T).table
    s = layer_summary(t)
    decode = t[t["step"] >= 1]  # step 0's token is the prefill's, at full depth whatever the schedule
    assert s["layer"].tolist() == list(range(opt.num_layers))
    np.testing.assert_allclose(s["ran"], decode.groupby("layer")["ran"].mean())
    assert s.loc[s["layer"] == opt.num_layers - 1, "kl_to_final"].item() == 0
    assert s.loc[s["layer"] == opt.num_layers - 1, "top_is_generated"].item() == 1
    # a layer the schedule skips ran only in the prefill: no decode token's numbers, none of the prefill's
    skipped_layer = 2
    assert t[(t["layer"] == skipped_layer) & (t["step"] == 0)]["ran"].all()
    row = s[s["layer"] == skipped_layer].iloc[0]
    assert row["tokens_ran"] == 0 and row["ran"] == 0
    for stat in ("residual_cos", "kl_to_final", "entropy", "top_prob", "top_is_generated"):
        assert np.isnan(row[stat]), stat
    # a layer that ran: the mean over the decode tokens where it ran
    top = opt.num_layers - 2
    ran_top = decode[(decode["layer"] == top) & decode["ran"]]
    row = s[s["layer"] == top].iloc[0]
    assert row["tokens_ran"] == len(ran_top) > 0
    for stat in ("residual_cos", "kl_to_final", "entropy", "top_prob"):
        assert row[stat] == pytest.approx(ran_top[stat].mean()), stat
    # a table of the prefill's token alone keeps every layer, none with decode tokens
    first = layer_summary(t[t["step"] == 0])
    assert first["layer"].tolist() == list(range(opt.num_layers)) and (first["tokens_ran"] == 0).all()


@pytest.mark.parametrize("fmt", ["parquet", "jsonl", "csv"])
def test_lens_files_round_trip(opt, tmp_path, fmt):
    sched = Schedule(opt.num_layers, "constant", "skip", 3, 3)
    lens = layer_lens(opt, PROMPTS, sched, T)
    path = write_lens(lens.table, tmp_path / f"lens.{fmt}", lens.metadata)
    back, meta = read_lens(path)
    assert meta["run_id"] == lens.metadata["run_id"] and meta["lens"]["tokens"] == "own decode"
    pd.testing.assert_frame_equal(
        back, lens.table, check_dtype=False, check_exact=True
    )  # every double's bits
    assert back["residual_cos"].isna().sum() == lens.table["residual_cos"].isna().sum() > 0
    with pytest.raises(UserError, match="exists"):
        write_lens(lens.table, path, lens.metadata)


def test_read_lens_names_missing_columns(opt, tmp_path):
    t = layer_lens(opt, PROMPTS[:1], None, 3).table.drop(columns=["entropy", "topk"])
    path = tmp_path / "bad.csv"
    t.to_csv(path, index=False)
    with pytest.raises(TraceSchemaError, match="missing columns 'entropy', 'topk'"):
        read_lens(path)


def test_heatmap_draws_skipped_cells_in_one_neutral_colour_and_fits_its_column(opt):
    from skipcore.plots.style import GROUND, SKIP_MARK, SKIPPED

    sched = Schedule(opt.num_layers, "linear", "skip", max_layers=6, min_layers=2, warmup_layers=1)
    t = layer_lens(opt, PROMPTS, sched, T).table
    sample = t[t["sample"] == 1]
    for stat in STATS:
        fig = lens_heatmap(t, 1, stat)
        heat, skipped, key = fig.data
        ran_cells, skipped_cells = (
            np.isfinite(np.asarray(heat.z, float)),
            np.isfinite(np.asarray(skipped.z, float)),
        )
        assert ran_cells.shape == (opt.num_layers, sample["step"].nunique())
        assert skipped_cells.sum() == (~sample["ran"]).sum() > 0  # every skipped cell, and only those
        assert not (ran_cells & skipped_cells).any()  # a skipped cell never takes the statistic's colour
        assert {c for _, c in skipped.colorscale} == {SKIPPED}
        # each skipped cell carries an x, the legend's entry (one trace alone would be hidden), on a white ground:
        # the neutral fill was the background's own grey
        marked = set(zip(key.y, key.x, strict=True))
        assert marked == {(int(r.layer), int(r.step)) for r in sample[~sample["ran"]].itertuples()}
        assert key.showlegend and key.marker.color == SKIP_MARK and fig.layout.plot_bgcolor == GROUND
        assert fig.layout.width is None  # the figure takes its container's width
    hover = np.asarray(lens_heatmap(t, 1, "top_prob").data[0].text)
    top = json.loads(sample.sort_values(["step", "layer"]).iloc[0]["topk"])
    assert repr(top[1][1]).replace("<", "&lt;") in hover[0, 0]  # the second-best token is on hover
    with pytest.raises(ValueError, match="unknown lens statistic"):
        lens_heatmap(t, 1, "nope")


def test_summary_and_agreement_figures(opt):
    sched = Schedule(opt.num_layers, "linear", "skip", max_layers=6, min_layers=2, warmup_layers=1)
    cmp = compare_with_full_depth(opt, PROMPTS, sched, T)
    fig = layer_summary_figure({"full": layer_summary(cmp.full.table), "skip": layer_summary(cmp.path.table)})
    assert len(fig.data) == 4 and fig.layout.width is None
    fig = agreement_figure({"skip": cmp.agreement})
    bars = fig.data[0]
    assert list(bars.y) == list(cmp.agreement.by_budget["agreement"])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_the_lens_follows_the_graph_decode(model_dirs):
    """On a GPU, generate replays CUDA graphs over a static cache; the lens replays eagerly, so its last layer
    matches generate's log-probabilities to float tolerance, and its masks exactly."""
    eng = engine_for(model_dirs, "opt", attn="sdpa", device="cuda")
    assert eng.static
    sched = Schedule(eng.num_layers, "linear", "skip", max_layers=6, min_layers=2, warmup_layers=1)
    ref = eng.generate(PROMPTS, sched, T)
    lens = layer_lens(eng, PROMPTS, sched, T)
    tr = live(ref.trace)
    assert (masks(lens.table) == tr["layer_mask"]).all()
    np.testing.assert_allclose(final_rows(lens.table)["logprob"], tr["logprob"], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("family", ["llama", "opt"])
def test_the_lens_of_a_fused_decode_replays_its_steps_on_the_fused_layers(model_dirs, family, monkeypatch):
    """A decode on the fused step: the lens replays its steps through the same fused layers (as many fused calls
    again as the decode made), so it reads what the steps computed; its masks are the trace's, and its last
    layer the decode's log-probabilities."""
    from skipcore.kernels import fused as fused_module
    from skipcore.models.loading import load_model

    calls = []
    for form in fused_module.FUSED_LAYERS:

        def counting(self, hidden, *args, original=form.__call__):
            calls.append(hidden.shape[1])
            return original(self, hidden, *args)

        monkeypatch.setattr(form, "__call__", counting)
    model, tok = load_model(
        str(model_dirs[family]), device="cpu", dtype="float32", attn_implementation="sdpa"
    )
    eng = SkipEngine(model, tok, static=True, fused=True)
    sched = Schedule(eng.num_layers, "linear", "skip", max_layers=6, min_layers=2, warmup_layers=1)
    ref = eng.generate(PROMPTS, sched, T)
    decoded = len(calls)
    assert decoded > 0
    lens = layer_lens(eng, PROMPTS, sched, T)
    assert len(calls) == 3 * decoded  # the lens's own decode, then its replay of the steps
    tr = live(ref.trace)
    assert (masks(lens.table) == tr["layer_mask"]).all()
    np.testing.assert_allclose(final_rows(lens.table)["logprob"], tr["logprob"], rtol=1e-5, atol=1e-5)


def test_the_lens_breaks_a_tie_as_the_greedy_pick_does():
    """Two tokens at one probability (common in a bfloat16 read-out): the lens's top token is the one `argmax`,
    the decode's greedy pick, takes (the first id), and equal tokens follow in id order; `topk` ordered them as
    it liked, so the final layer's top token could part from the generated one."""
    from skipcore.lens.replay import _top

    logp = torch.full((2, 3, 50), -9.0)
    logp[..., 40] = logp[..., 7] = -0.5  # a tie at the top
    logp[..., 12] = logp[..., 30] = -1.0
    ids, values = _top(logp, 4)
    assert (ids[..., 0] == logp.argmax(-1)).all() and ids[0, 0].tolist() == [7, 40, 12, 30]
    assert values[0, 0].tolist() == [-0.5, -0.5, -1.0, -1.0]
    shuffled = torch.randn(4, 2, 1000)
    ids, values = _top(shuffled, 5)
    want = shuffled.topk(5, dim=-1)
    assert torch.equal(values, want.values) and torch.equal(ids, want.indices)  # no tie: topk's own answer


def test_the_lens_of_every_policy_passes_its_readers_value_checks(opt):
    """The reader's value checks hold for what the library makes: full depth, a skip schedule, CALM (per-row
    exits, K/V propagated), adaptive, and a teacher-forced path."""
    from skipcore.lens.files import validate_lens

    sched = Schedule(opt.num_layers, "linear", "skip", max_layers=6, min_layers=2, warmup_layers=1)
    calm = CalmPolicy(threshold=0.2, min_layers=2)
    tables = [
        layer_lens(opt, PROMPTS, p, T).table
        for p in (None, sched, calm, AdaptivePolicy(min_layers=2, threshold=0.0, drop=1))
    ]
    tables.append(compare_with_full_depth(opt, PROMPTS, sched, T).path.table)
    for table in tables:
        validate_lens(table.copy(), "lens")


def _flip_a_layer(t: pd.DataFrame) -> pd.DataFrame:
    at = t["layer"] == 2
    return t.assign(
        ran=np.where(at, ~t["ran"], t["ran"]), residual_cos=np.where(at, np.nan, t["residual_cos"])
    )


@pytest.mark.parametrize(
    "corrupt, said",
    [
        (lambda t: t.assign(top_prob=np.where(t.index == 3, 1.7, t["top_prob"])), "'top_prob' must hold probabilities"),
        (lambda t: t.assign(p_generated=-t["p_generated"]), "'p_generated' must hold probabilities from 0 to 1"),
        (lambda t: t.assign(kl_to_final=np.where(t.index == 5, -3.0, t["kl_to_final"])), "'kl_to_final' must hold values >= 0"),
        (lambda t: t.assign(entropy=np.nan), "'entropy' must hold values >= 0"),
        (lambda t: t.assign(logprob=0.5), "'logprob' must hold finite log-probabilities <= 0"),
        (lambda t: t.assign(layer=-t["layer"]), "column 'layer' has negative values"),
        (lambda t: t.drop(index=4), "a token is not read at each of the 6 layers 0..5 once"),
        (lambda t: pd.concat([t, t.iloc[:1]], ignore_index=True), "a token is not read at each of the 6 layers"),
        (_flip_a_layer, "column 'ran' disagrees with 'num_layers_run'"),
        (lambda t: t.assign(residual_cos=2.0), "column 'residual_cos' has a value where its layer did not run"),
        (lambda t: t.assign(residual_cos=t["residual_cos"] * 3), "'residual_cos' must hold cosines from -1 to 1"),
    ],
)  # fmt: skip
def test_read_lens_checks_values_not_only_types(opt, tmp_path, corrupt, said):
    """A lens file holding a top_prob of 1.7, a negative KL, a missing layer or a `ran` flipped for a whole layer
    read as a lens: the trace reader refuses such files, the lens reader did not look."""
    sched = Schedule(opt.num_layers, "constant", "skip", 3, 3)
    table = layer_lens(opt, PROMPTS, sched, 4).table
    path = tmp_path / "bad.csv"
    corrupt(table).to_csv(path, index=False)
    with pytest.raises(TraceSchemaError, match=re.escape(said)):
        read_lens(path)
