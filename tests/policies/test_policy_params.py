"""A policy's parameters are declared once, on the policy (`skipcore.policies.params`): a knob added to a policy in
one place appears as a generate flag, a sweep axis, a results column and a dashboard widget, and is checked with
one message that each front end says in its own words."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import ClassVar

import pandas as pd
import pytest

from skipcore.errors import UserError
from skipcore.policies import POLICY_CLASSES, AdaptivePolicy, CalmPolicy
from skipcore.policies.params import param, params_of


@dataclass(frozen=True)
class PatientAdaptive(AdaptivePolicy):
    """Adaptive SkipDecode with one more knob, declared here and nowhere else."""

    patience: int = param(
        1,
        kind=int,
        low=1,
        help="confident steps in a row before the budget drops",
        title="adaptive patience",
        sweep_default=(1, 2),
    )
    name: ClassVar[str] = "patient"


WITH_NEW = {**POLICY_CLASSES, PatientAdaptive.name: PatientAdaptive}


def parser_with(policies) -> argparse.ArgumentParser:
    from skipcore.commands.common import add_length_args, add_schedule_args
    from skipcore.commands.decoding import add_policy_args

    p = argparse.ArgumentParser()
    add_schedule_args(p)
    add_length_args(p)
    add_policy_args(p, policies)
    return p


def test_the_declaration_names_the_knob_everywhere():
    knob = params_of(PatientAdaptive)[-1]
    assert (knob.name, knob.flag, knob.column, knob.sweep_flag) == (
        "patience",
        "--patient-patience",
        "patient_patience",
        "--patient-patiences",
    )
    # the parent's own declarations are inherited as they are, renamed for the new policy only where not spelled
    assert [p.flag for p in params_of(PatientAdaptive)][:3] == [
        "--patient-threshold",
        "--patient-drop",
        "--min-layers",
    ]
    assert [p.column for p in params_of(AdaptivePolicy)][:3] == [
        "adaptive_threshold",
        "adaptive_drop",
        "adaptive_min_layers",
    ]


def test_a_new_knob_is_a_generate_flag_with_its_checks():
    from skipcore.commands.decode_settings import DepthSettings
    from skipcore.commands.decoding import policy_of

    p = parser_with(WITH_NEW)
    assert (
        "--patient-patience" in p.format_help()
        and "--patient-patience" not in parser_with(POLICY_CLASSES).format_help()
    )
    argv = ["--policy", "patient", "--schedule", "linear", "--target-speedup", "2", "--patient-patience", "3"]
    policy = policy_of(DepthSettings.from_args(p.parse_args(argv)), 12, 10, 10)
    assert isinstance(policy, PatientAdaptive) and policy.patience == 3 and policy.min_layers >= 1
    with pytest.raises(UserError, match="--patient-patience must be >= 1, got 0"):
        policy_of(DepthSettings.from_args(p.parse_args([*argv, "--patient-patience", "0"])), 12, 10, 10)


def test_a_new_knob_is_a_sweep_axis_and_a_column(model_dirs, tmp_path, monkeypatch):
    from skipcore.commands.sweep import add_policy_grid_args
    from skipcore.evaluate.sweep import SweepConfig, run_sweep
    from skipcore.evaluate.sweep import grid as grid_module
    from skipcore.evaluate.sweep.settings import sweep_params
    from skipcore.labels import column_title

    p = argparse.ArgumentParser()
    add_policy_grid_args(p, WITH_NEW)
    assert p.parse_args([]).patient_patiences == (1, 2)
    assert p.parse_args(["--patient-patiences", "2,3"]).patient_patiences == (2, 3)
    # the registries a new policy joins (a knob on an existing policy needs not even this)
    monkeypatch.setitem(POLICY_CLASSES, PatientAdaptive.name, PatientAdaptive)
    entry = grid_module.EngineGrid(PatientAdaptive.name, grid_module.POLICY_GRID["adaptive"].designs)
    monkeypatch.setitem(grid_module.POLICY_GRID, PatientAdaptive.name, entry)
    assert "patient_patience" in sweep_params() and column_title("patient_patience") == "adaptive patience"
    data = tmp_path / "d.jsonl"
    data.write_text('{"source": "name[The Eagle]", "target": "The Eagle."}\n')
    cfg = SweepConfig(
        model=str(model_dirs["opt"]),
        dataset=str(data),
        out=tmp_path / "s.parquet",
        split=None,
        targets=(1.0,),
        batch_sizes=(1,),
        policies=("patient",),
        policy_values={"patient_patience": (2, 3), "patient_min_layers": (2,), "patient_threshold": (0.5,)},
        max_new_tokens=4,
        device="cpu",
        repeats=0,
        progress=False,
    )
    built = []
    original = entry.build

    def build(setting, num_layers, cfg):
        policy, columns = original(setting, num_layers, cfg)
        built.append(policy)
        return policy, columns

    monkeypatch.setattr(entry, "build", build)
    df = run_sweep(cfg)
    rows = df[df["policy"] == "patient"]
    assert sorted(rows["patient_patience"]) == [2, 3] and rows["setting_id"].is_unique
    assert {b.patience for b in built if isinstance(b, PatientAdaptive)} == {2, 3}
    assert pd.read_parquet(cfg.out)["patient_patience"].dropna().tolist() == rows["patient_patience"].tolist()


def test_a_new_knob_is_a_dashboard_widget_kept_in_the_address():
    from streamlit.testing.v1 import AppTest

    def page():
        import streamlit as st

        from app.dashboard.policy_inputs import policy_inputs
        from tests.policies.test_policy_params import PatientAdaptive

        st.session_state["values"] = policy_inputs(st, PatientAdaptive, 12, "cmp")

    at = AppTest.from_function(page).run()
    widget = next(w for w in at.number_input if w.key == "cmp_patient_patience")
    assert widget.label == "Adaptive patience" and widget.value == 1
    widget.set_value(4).run()
    assert at.session_state["values"]["patience"] == 4
    assert {w.key for w in at.slider} == {"cmp_patient_threshold"}  # a threshold's slider over [0, 1]


def test_each_front_end_says_a_refused_value_its_own_way():
    with pytest.raises(UserError) as python:
        CalmPolicy(threshold=float("inf"))
    assert (
        str(python.value) == "threshold must be a finite number, got inf"
        and python.value.field == "threshold"
    )
    assert python.value.said_as({"threshold": "--calm-threshold"}).startswith("--calm-threshold must be")
    with pytest.raises(UserError, match="calm_measure"):
        from skipcore.evaluate.sweep import SweepConfig, check_config

        check_config(
            SweepConfig(model="m", dataset="d", out="x.parquet", policy_values={"calm_measure": ("x",)})
        )
