"""Decoding policies compared in one table: SkipDecode's static schedules and the CALM-DEC baseline.

A policy turns prompts into a `GenerationResult` with the same trace schema, so the quality and cost
accounting in `skipcore.quality` is one code path for all of them.
"""

from __future__ import annotations

from skipcore.errors import UserError
from skipcore.policies.base import Policy, StaticPolicy
from skipcore.policies.calm import MEASURES, CalmPolicy, calm_generate

POLICIES = ("static", "calm")


def policy_from_name(name: str) -> Policy:
    """The policy a name stands for, with default parameters (CALM's threshold then comes from flags)."""
    if name == "static":
        return StaticPolicy()
    if name == "calm":
        return CalmPolicy()
    raise UserError(f"unknown policy {name!r}; choose one of {', '.join(POLICIES)}")


__all__ = [
    "MEASURES",
    "POLICIES",
    "CalmPolicy",
    "Policy",
    "StaticPolicy",
    "calm_generate",
    "policy_from_name",
]
