"""The depth-policy flags (`--policy` and each policy's own), declared once for every command that decodes."""

from __future__ import annotations

import argparse
import math

from skipcore.commands.common import schedule_from_args
from skipcore.errors import UserError
from skipcore.policies import (
    MEASURES,
    POLICIES,
    SIGNALS,
    AdaptivePolicy,
    CalmPolicy,
    SpeculativePolicy,
    StaticPolicy,
)
from skipcore.policies.base import DepthPolicy


def add_policy_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "depth policy",
        "static: the schedule above (SkipDecode). calm: CALM-DEC, each token exits when confident (the schedule "
        "flags are not used). adaptive: one budget for the batch, starting at --max-layers and dropping by "
        "--adaptive-drop after each step whose least confident running row is confident enough, never below "
        "--min-layers (default: the floor --target-speedup gives), mapped to layers by --mode. speculative: "
        "lossless; each row drafts --draft-tokens tokens with the schedule above, one full-depth pass verifies "
        "them and the row keeps the drafts the full model agrees with plus one token of its own (greedy output "
        "is full depth's; sampled output has its distribution).",
    )
    g.add_argument("--policy", default="static", choices=POLICIES, help="(default: %(default)s)")
    g.add_argument(
        "--calm-threshold",
        type=float,
        default=0.9,
        help="calm: exit once the confidence reaches this (default: %(default)s)",
    )
    g.add_argument(
        "--calm-measure",
        default="softmax",
        choices=MEASURES,
        help="calm: softmax = top probability, top2 = top minus second (default: %(default)s)",
    )
    g.add_argument(
        "--calm-min-layers",
        type=int,
        default=1,
        help="calm: layers that always run before a token may exit (default: %(default)s)",
    )
    g.add_argument(
        "--adaptive-threshold",
        type=float,
        default=0.5,
        help="adaptive: confident when the lowest top probability >= this (max_prob) or the highest entropy "
        "<= this in nats (entropy) (default: %(default)s)",
    )
    g.add_argument("--adaptive-signal", default="max_prob", choices=SIGNALS, help="(default: %(default)s)")
    g.add_argument(
        "--adaptive-drop",
        type=int,
        default=2,
        help="adaptive: layers dropped per confident step (default: %(default)s)",
    )
    g.add_argument(
        "--draft-tokens",
        type=int,
        default=4,
        help="speculative: tokens each row drafts before a full-depth pass verifies them (default: %(default)s)",
    )


def policy_from_args(
    args: argparse.Namespace, num_layers: int, max_new_tokens: int, speedup_over: int | None
) -> DepthPolicy:
    """The policy the flags describe, checked against the model before any generation."""
    if args.policy == "calm":
        policy: DepthPolicy = CalmPolicy(args.calm_threshold, args.calm_measure, args.calm_min_layers)
    else:
        schedule = schedule_from_args(args, num_layers, max_new_tokens, speedup_over)
        if args.policy == "static":
            policy = StaticPolicy(schedule)
        elif args.policy == "speculative":
            policy = SpeculativePolicy(schedule, args.draft_tokens)
        else:
            if not math.isfinite(args.adaptive_threshold):
                raise UserError(f"--adaptive-threshold must be finite, got {args.adaptive_threshold}")
            policy = AdaptivePolicy(
                min_layers=args.min_layers if args.min_layers is not None else schedule.min_layers,
                max_layers=args.max_layers,
                mode=args.mode,
                warmup_layers=args.warmup_layers,
                threshold=args.adaptive_threshold,
                signal=args.adaptive_signal,
                drop=args.adaptive_drop,
            )
    policy.check(num_layers, max_new_tokens)
    return policy
