"""The documentation a newcomer reads: the site builds strictly (MkDocs, the API reference from the docstrings, every
link and anchor checked), the README stays short with its two set-up commands, every relative link resolves inside
the repository, and no page carries notes meant for the people who built it."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.helpers import REPO

README = REPO / "README.md"
DOCS = REPO / "docs"
PAGES = [README, *DOCS.rglob("*.md"), REPO / "notebooks" / "README.md", *(REPO / "data").rglob("README.md")]
LINK = re.compile(r"\]\(([^)\s]+)\)")  # a Markdown link or image target
INTERNAL = re.compile(
    r"\bissue ?#?\d+|this session|these sessions|lent to (this|a) session|\.\./shared", re.I
)


@pytest.mark.slow
def test_the_site_builds_strictly(tmp_path):
    pytest.importorskip("mkdocs", reason="mkdocs is not installed (pip install -r requirements.txt)")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    site = tmp_path / "site"
    for page in ("index.html", "real-models/index.html", "results/index.html", "api/decode/index.html"):
        assert (site / page).is_file(), page
    api = (site / "api" / "decode" / "index.html").read_text()
    assert "SkipEngine" in api and "generate" in api  # the reference is generated from the docstrings
    assert "fonts.googleapis" not in (site / "index.html").read_text()  # it reads offline


def test_every_relative_link_resolves_inside_the_repository():
    for page in PAGES:
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # code blocks hold no links
        for target in LINK.findall(text):
            if re.match(r"[a-z]+://|mailto:|#", target):
                continue
            path = (page.parent / target.split("#")[0]).resolve()
            assert path.is_relative_to(REPO), (
                f"{page.relative_to(REPO)} links out of the repository: {target}"
            )
            assert path.exists(), f"{page.relative_to(REPO)} links to a missing file: {target}"


def test_no_page_carries_notes_for_its_builders():
    notebooks = [*(REPO / "notebooks").glob("*.ipynb")]
    for page in [*PAGES, *notebooks]:
        found = INTERNAL.search(page.read_text())
        assert found is None, f"{page.relative_to(REPO)}: {found.group(0)!r}"


def test_the_readme_is_short_and_has_the_two_set_up_commands():
    text = README.read_text()
    assert len(text.splitlines()) <= 100
    setup = text.split("## Set-up", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"^bash \S+", setup, flags=re.M)
    assert commands == ["bash scripts/start.sh", "bash scripts/test.sh"]
    assert (
        REPO / "docs" / "images" / "dashboard.png"
    ).is_file()  # the screenshot, made by scripts/readme_screenshot.py
    assert "bash scripts/test.sh" in (REPO / ".ci" / "run").read_text()  # CI runs what the README says


def test_every_name_the_package_exports_is_on_an_api_page_and_says_what_it_is():
    """The API reference renders modules (`::: module`) or single objects (`::: module.Name`): every name
    `skipcore` exports is in one of them, and has a docstring of its own (errors, the sweep's executors, the
    cost model's shapes were on no page; `full_schedule` and `Sampling` said nothing)."""
    import importlib
    import inspect

    import skipcore

    def rendered(path: str) -> object:
        """What `::: path` renders: a module, or an object in one."""
        try:
            return importlib.import_module(path)
        except ModuleNotFoundError:
            module, name = path.rsplit(".", 1)
            return getattr(importlib.import_module(module), name)

    shown = [
        rendered(path)
        for page in (DOCS / "api").glob("*.md")
        for path in re.findall(r"^::: (\S+)", page.read_text(), re.M)
    ]

    def on_a_page(name: str, obj: object) -> bool:
        """Rendered itself, or defined in a rendered module (a constant has no __module__: the module holding
        it)."""
        return any(
            target is obj
            or inspect.ismodule(target)
            and getattr(target, name, None) is obj
            and getattr(obj, "__module__", target.__name__) == target.__name__
            for target in shown
        )

    names = [n for n in skipcore.__all__ if n != "__version__"]
    assert [n for n in names if not on_a_page(n, getattr(skipcore, n))] == []
    # a docstring of its own: not missing, and not the signature a dataclass is given in its place
    said = {n: inspect.getdoc(getattr(skipcore, n)) or "" for n in names if callable(getattr(skipcore, n))}
    assert [n for n, doc in said.items() if not doc.strip() or doc.startswith(f"{n}(")] == []
