"""Starting up is cheap: `import skipcore` and the command line's `--help` import neither torch nor transformers
(the package root imports a public name on first use), and the public names still import as before."""

from __future__ import annotations

import subprocess
import sys

import pytest

from skipcore.commands import SUBCOMMANDS
from tests.helpers import REPO

HEAVY = ("torch", "transformers", "pandas")


def _imported_after(code: str) -> dict[str, bool]:
    probe = f"{code}\nimport sys\nprint({{m: m in sys.modules for m in {HEAVY!r}}})"
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=300, check=True
    )
    return eval(out.stdout.strip().splitlines()[-1])  # noqa: S307 (our own probe's dict)


@pytest.mark.parametrize("argv", [["--help"], *([name, "--help"] for name in SUBCOMMANDS)])
def test_help_imports_no_heavy_library(argv):
    code = (
        "import contextlib, io\nfrom skipcore.commands import main\n"
        f"with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.suppress(SystemExit):\n"
        f"    main({argv!r})\n"
        "assert 'usage:' in out.getvalue()"
    )
    assert _imported_after(code) == dict.fromkeys(HEAVY, False)


def test_top_level_help_lists_every_command(capsys):
    from skipcore.commands import SUBCOMMANDS, main

    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    for name, summary in SUBCOMMANDS.items():
        assert name in text and summary.split()[0] in text


def test_an_unknown_command_is_one_line(capsys):
    from skipcore.commands import main

    with pytest.raises(SystemExit) as e:
        main(["nonsense"])
    assert e.value.code == 2 and "invalid choice: 'nonsense'" in capsys.readouterr().err


def test_the_package_root_is_light_and_still_exports_everything():
    assert _imported_after("import skipcore") == dict.fromkeys(HEAVY, False)
    import skipcore

    for name in skipcore.__all__:
        assert getattr(skipcore, name) is not None, name
        assert name in dir(skipcore)
    from skipcore import SkipEngine
    from skipcore.decode.engine import SkipEngine as defined

    assert SkipEngine is defined
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        _ = skipcore.nothing_here
