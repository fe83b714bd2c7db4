"""generate's and the lens's flags read once into typed settings (`DecodeSettings`), a run that works from them and
writes nothing into the parsed flags, and the options a user typed known through argparse's public API alone."""

from __future__ import annotations

import argparse
import ast
import dataclasses

import pytest

from skipcore.commands import GivenOnlyParser, build_parser, given_options
from skipcore.commands.decode_settings import DecodeSettings, DepthSettings
from skipcore.commands.generate import GenerateSettings
from skipcore.commands.lens import LensSettings
from skipcore.policies import SpeculativePolicy
from tests.helpers import REPO, refused


def parsed(*argv: str) -> argparse.Namespace:
    return build_parser((argv[0],)).parse_args(list(argv))


def test_generate_reads_its_flags_into_typed_settings():
    args = parsed(
        "generate", "--prompt", "a", "--prompt", "b", "--policy", "speculative", "--draft-tokens", "3",
        "--schedule", "linear", "--target-speedup", "2.5", "--dtype", "bfloat16", "--do-sample", "--seed", "7",
    )  # fmt: skip
    s = GenerateSettings.from_args(args)
    assert isinstance(s, DecodeSettings) and isinstance(s.depth, DepthSettings)
    assert s.prompt == ("a", "b") and s.dtype == "bfloat16" and s.max_new_tokens is None
    assert (s.depth.schedule, s.depth.target_speedup, s.depth.policy) == ("linear", 2.5, "speculative")
    assert s.depth.policy_class is SpeculativePolicy and s.depth.lossless
    assert s.depth.policy_params["draft_tokens"] == 3
    assert s.sampling().do_sample and s.sampling().seed == 7
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.max_new_tokens = 4  # type: ignore[misc]


def test_the_lens_reads_its_own_top_k():
    """--top-k is the lens's read-outs there, a sampling cut in generate: each command's settings say which."""
    lens = LensSettings.from_args(parsed("lens", "--top-k", "3", "--no-agreement"))
    assert (lens.top_k, lens.agreement, lens.prompt) == (3, False, ())
    assert GenerateSettings.from_args(parsed("generate")).top_k == 0


def test_the_settings_have_no_defaults_of_their_own():
    """The flags' defaults are the only ones: a settings object is always read from the flags."""
    for cls in (DepthSettings, DecodeSettings, GenerateSettings, LensSettings):
        assert all(f.default is dataclasses.MISSING for f in dataclasses.fields(cls)), cls


@pytest.mark.parametrize("command", ["generate", "lens"])
def test_a_run_writes_nothing_into_the_parsed_flags(model_dirs, capsys, command):
    argv = [
        command,
        "--model",
        str(model_dirs["opt"]),
        "--prompt",
        "MR: name[Aromi]",
        "--max-new-tokens",
        "3",
    ]
    args = parsed(*argv, "--threads", "1", "--policy", "speculative" if command == "generate" else "static")
    before = dict(vars(args))
    assert args.func(args, given_options(argv)) == 0
    assert vars(args) == before
    capsys.readouterr()


@pytest.mark.parametrize(
    ("argv", "given"),
    [
        (["generate"], {"command"}),
        (
            ["generate", "--max-new-tokens", "3", "--temperature=1.0"],
            {"command", "max_new_tokens", "temperature"},
        ),
        (["generate", "--prompt", "a", "--prompt", "b", "--do-sample"], {"command", "prompt", "do_sample"}),
        (["lens", "--no-agreement", "--top-k", "5"], {"command", "agreement", "top_k"}),  # 5 is its default
        (["train", "--out", "x", "--lr", "5e-4"], {"command", "out", "lr"}),
        (["tune", "--out", "x", "--trials", "3"], {"command", "out", "trials"}),
    ],
)
def test_given_options_are_what_argv_typed(argv, given):
    """A value typed equal to its default is given all the same; --flag=value resolves as argparse resolves it."""
    assert given_options(argv) == given


def test_the_given_only_parser_is_the_same_command_line_with_no_defaults():
    plain, bare = build_parser(("generate",)), build_parser(("generate",), GivenOnlyParser)
    assert vars(bare.parse_args(["generate", "--quiet"])) == {"command": "generate", "quiet": True}
    assert plain.parse_args(["generate"]).max_new_tokens is None and plain.parse_args(["generate"]).top_k == 0
    with pytest.raises(SystemExit):  # the same choices and types
        bare.parse_args(["generate", "--dtype", "float64"])


def test_the_command_line_touches_no_argparse_internals():
    """`given_options` knows the typed options through argparse's public API: nothing in skipcore/commands reads or
    rewrites a parser's private defaults or actions, nor sets an action's default after the fact."""
    for path in sorted((REPO / "skipcore" / "commands").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute):
                assert node.attr not in ("_defaults", "_actions", "_option_string_actions"), path.name
                if isinstance(node.ctx, ast.Store):
                    assert node.attr != "default", path.name


def test_a_flag_is_taken_only_as_spelled_in_full_and_an_unknown_one_is_said_with_the_nearest(capsys):
    """`--max-new 5` ran as --max-new-tokens (argparse takes any unambiguous start: a flag added later could make it
    mean another); an unknown flag was said as the whole command line's, with no way on."""
    for typed, near in (("--max-new", "--max-new-tokens"), ("--tempreature", "--temperature")):
        said = refused(capsys, ["generate", typed, "3"])
        assert (
            said
            == f"error: python -m skipcore generate: unrecognized arguments: {typed} 3 (did you mean {near}?)"
        )
    assert refused(capsys, ["generate", "--bogus"]).endswith("unrecognized arguments: --bogus")


def test_a_negative_number_argparse_takes_for_a_flag_is_said_with_how_to_write_it(capsys):
    """`--lr -1e-3` was refused as "expected one argument" alone: argparse reads only plain negative numbers (-1,
    -0.5) as values. The line says how to write it; a flag given no value at all is said as before."""
    said = refused(capsys, ["train", "--lr", "-1e-3", "--out", "x"])
    assert said == (
        "error: python -m skipcore train: argument --lr: expected one argument "
        "(a value that starts with '-' reads as a flag: write --lr=-1e-3)"
    )
    assert refused(capsys, ["generate", "--max-new-tokens", "--out", "x"]).endswith(
        "argument --max-new-tokens: expected one argument"
    )


def test_a_sweep_axis_says_its_own_default_alone():
    """sweep --draft-tokens said the one-run default of generate ("4 on a CPU in float32, ...") and then its own
    (2,4,8): a sweep ran 2, 4 and 8."""
    sweep = build_parser(("sweep",)).commands["sweep"]
    (helps,) = [a.help for a in sweep._actions if "--draft-tokens" in a.option_strings]
    assert helps.count("(default:") == 1 and helps.endswith("comma-separated (default: 2,4,8)")


def test_train_says_its_own_schedule_default_and_what_a_resume_may_change():
    """train's --schedule help was generate's (it spoke of policies train has none of), and --resume's left out
    --lr, which a resume takes."""
    from skipcore.training.settings import MAY_CHANGE

    train = build_parser(("train",)).commands["train"]
    helps = {a.option_strings[0]: a.help for a in train._actions if a.option_strings}
    assert "policy" not in helps["--schedule"] and "--elastic" in helps["--schedule"]
    assert (
        all(f"--{name.replace('_', '-')}" in helps["--resume"] for name in MAY_CHANGE)
        and "--lr" in helps["--resume"]
    )


def test_an_interrupted_command_says_what_it_kept(monkeypatch, capsys):
    """Ctrl-C said "interrupted" alone: what the stopped work left, and the way on, went unsaid."""
    from skipcore import commands
    from skipcore.commands import generate

    def stopped(args, given):
        raise KeyboardInterrupt

    monkeypatch.setattr(generate, "run_generate", stopped)
    assert commands.main(["generate", "--prompt", "x"]) == 130
    assert (
        capsys.readouterr().err
        == "error: interrupted; nothing was written (a trace is written when the run ends, or of the batches "
        "that finished)\n"
    )
