"""`bash scripts/start.sh notebooks` installs JupyterLab (pinned, the first time) and serves notebooks/: the browser
lists every notebook, and a notebook runs in the server's kernel as the notebook tests run it (this environment's
Python, the notebooks' folder as its working directory, offline), its file left untouched.

Slow: the first run installs JupyterLab from PyPI. Skips, with the reason, when chromium or Playwright is missing.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from tests.helpers import REPO

pytestmark = pytest.mark.slow  # a Jupyter server (installed on first use) and Chromium

NOTEBOOKS = REPO / "notebooks"
CHROMIUM = Path("/usr/bin/chromium")
SHOTS = REPO / "artifacts" / "screenshots"
START_TIMEOUT_S = 600  # the first start installs JupyterLab
RUN_TIMEOUT_S = 300
QUICK = "08_real_finetune.ipynb"  # reads the shipped sweeps, runs no model: seconds


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _api(url: str, token: str, path: str, body: dict | None = None, method: str = "GET"):
    request = urllib.request.Request(
        f"{url}/api/{path}",
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"token {token}", "Content-Type": "application/json"},
        method=method,
    )
    with urllib.request.urlopen(request, timeout=30) as r:
        raw = r.read()
    return json.loads(raw) if raw else None


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """`bash scripts/start.sh notebooks` on a free port with a token of its own; stopped (its process group, which
    this fixture started) at the end, whatever happens. Yields (address, token)."""
    port, token = _free_port(), uuid.uuid4().hex
    log = tmp_path_factory.mktemp("lab") / "lab.log"
    cmd = [
        "bash",
        "scripts/start.sh",
        "notebooks",
        "--no-browser",
        f"--port={port}",
        "--ServerApp.ip=127.0.0.1",
    ]
    cmd.append(f"--IdentityProvider.token={token}")
    env = {**os.environ, "VENV": str(Path(sys.prefix))}  # this environment, as the tests run in it
    with log.open("w") as out:
        proc = subprocess.Popen(
            cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"the notebook command exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
            try:
                _api(url, token, "status")
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"no Jupyter server within {START_TIMEOUT_S} s:\n{log.read_text()[-3000:]}")
                time.sleep(1)
        yield url, token
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


def test_the_notebook_command_serves_every_notebook_in_jupyterlab(lab):
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install -y chromium)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    url, token = lab
    names = sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))
    listed = _api(url, token, "contents")["content"]
    assert set(names) <= {item["name"] for item in listed}  # the server's root is notebooks/
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox", "--headless"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(60_000)
            page.goto(f"{url}/lab?token={token}", wait_until="domcontentloaded")
            browser_list = page.locator(".jp-DirListing-content")
            for name in names:  # every notebook in JupyterLab's file browser
                browser_list.get_by_text(name, exact=True).wait_for()
            SHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SHOTS / "10-jupyterlab.png"))
        finally:
            browser.close()


def _execute(ws, code: str) -> tuple[str, list[str]]:
    """Run `code` in the kernel behind the websocket `ws`; (its status, what it printed and any error)."""
    msg_id = uuid.uuid4().hex
    header = {
        "msg_id": msg_id,
        "username": "test",
        "session": uuid.uuid4().hex,
        "msg_type": "execute_request",
    }
    content = {"code": code, "silent": False, "store_history": True, "user_expressions": {}}
    content |= {"allow_stdin": False, "stop_on_error": True}
    message = {
        "header": {**header, "version": "5.3"},
        "parent_header": {},
        "metadata": {},
        "content": content,
    }
    ws.send(json.dumps({**message, "channel": "shell", "buffers": []}))
    said, status, idle = [], None, False
    # the reply (shell channel) may come before the printed output (iopub): done once both the reply and the
    # kernel's return to idle for this request are in
    while status is None or not idle:
        raw = ws.recv()
        if not isinstance(raw, str):
            continue  # a binary frame: buffers of a rich output
        reply = json.loads(raw)
        if reply.get("parent_header", {}).get("msg_id") != msg_id:
            continue
        kind, body = reply["msg_type"], reply["content"]
        if kind == "stream":
            said.append(body["text"])
        elif kind == "error":
            said.append(f"{body['ename']}: {body['evalue']}")
        elif kind == "execute_reply":
            status = body["status"]
        elif kind == "status" and body.get("execution_state") == "idle":
            idle = True
    return status, said


def test_a_notebook_runs_in_the_servers_kernel_as_in_the_tests(lab):
    """The kernel JupyterLab starts for a notebook is this environment's Python, in notebooks/, offline; a
    notebook's cells run in it top to bottom without an error, and its file is not written."""
    websocket = pytest.importorskip("websocket", reason="websocket-client comes with jupyterlab")
    nbformat = pytest.importorskip("nbformat")
    url, token = lab
    before = (NOTEBOOKS / QUICK).read_bytes()
    session = _api(
        url,
        token,
        "sessions",
        {"path": QUICK, "name": QUICK, "type": "notebook", "kernel": {"name": "python3"}},
        "POST",
    )
    kernel = session["kernel"]["id"]
    ws = websocket.create_connection(
        f"{url.replace('http', 'ws')}/api/kernels/{kernel}/channels?token={token}", timeout=RUN_TIMEOUT_S
    )
    try:
        status, said = _execute(
            ws,
            "import os, sys; print(os.getcwd()); print(sys.prefix); print(os.environ.get('HF_HUB_OFFLINE'))",
        )
        assert status == "ok", said
        cwd, prefix, offline = "".join(said).split()
        assert (Path(cwd), Path(prefix), offline) == (NOTEBOOKS, Path(sys.prefix), "1")
        cells = [
            c.source for c in nbformat.read(NOTEBOOKS / QUICK, as_version=4).cells if c.cell_type == "code"
        ]
        for i, source in enumerate(cells):
            status, said = _execute(ws, source)
            assert status == "ok", f"{QUICK}, cell {i}: {''.join(said)[-2000:]}"
    finally:
        ws.close()
        _api(url, token, f"sessions/{session['id']}", method="DELETE")
    assert (NOTEBOOKS / QUICK).read_bytes() == before  # outputs stay in the kernel's replies, not in the file
