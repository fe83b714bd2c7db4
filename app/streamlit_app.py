"""skipcore dashboard: `streamlit run app/streamlit_app.py`.

Design a SkipDecode schedule, run it on a model, look at the per-token trace, keep and compare runs, weigh quality
against speedup, tune a schedule to a quality floor and compare policies. Opens on the shipped model
(data/models/skipdecode-opt-e2e) with no downloads; the sidebar also offers the installed real models and any local
folder or .gguf file, and SKIPCORE_APP_MODEL=/path/to/model makes another local folder the default. Every page keeps
its settings in the address.
"""

from __future__ import annotations

import sys
from pathlib import Path

APP_DIR = Path(__file__).resolve().parent
if str(APP_DIR.parent) not in sys.path:  # `app.dashboard` and skipcore from this checkout, uninstalled
    sys.path.insert(0, str(APP_DIR.parent))

import streamlit as st  # noqa: E402

from app.dashboard import address  # noqa: E402
from app.dashboard.figures import format_picker, page_style  # noqa: E402
from app.dashboard.models import model_sidebar  # noqa: E402
from app.dashboard.precision import precision_sidebar  # noqa: E402
from app.dashboard.results import run_page  # noqa: E402

SECTIONS = APP_DIR / "sections"
PAGES = [
    st.Page(SECTIONS / "designer.py", title="Schedule designer", icon=":material/tune:", default=True),
    st.Page(SECTIONS / "generate.py", title="Generate and trace", icon=":material/play_arrow:"),
    st.Page(SECTIONS / "history.py", title="Run history", icon=":material/history:"),
    st.Page(SECTIONS / "tradeoffs.py", title="Trade-offs", icon=":material/scatter_plot:"),
    st.Page(SECTIONS / "tune.py", title="Tune", icon=":material/model_training:"),
    st.Page(SECTIONS / "compare.py", title="Compare policies", icon=":material/compare:"),
    st.Page(SECTIONS / "explorer.py", title="Trace explorer", icon=":material/search:"),
    st.Page(SECTIONS / "lens.py", title="Layer lens", icon=":material/layers:"),
]

# the favicon is a file of the app: an icon name would be fetched from the internet, which fails offline
st.set_page_config(page_title="skipcore", page_icon=str(APP_DIR / "static" / "favicon.png"), layout="wide")
page = st.navigation(PAGES)
address.hold(page.url_path)  # Back or Forward onto an entry Streamlit pushed bare: the session's settings
precision_sidebar(model_sidebar())
format_picker()
page_style()
run_page(page)  # a page that stops early notes its settings itself (`address.stop`)
address.say_refused()  # a link's values no setting could take: said, not dropped silently
address.note(page.url_path)  # what `hold` keeps when Back or Forward comes to this page again
