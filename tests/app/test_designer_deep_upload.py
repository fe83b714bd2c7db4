"""Issue 60, case 13 on the dashboard: a schedule JSON nested 200,000 deep uploaded to the designer is said in its
error box (as `generate --schedule-json` says it), not a traceback, and the design stays as it was."""

from __future__ import annotations

from tests.helpers import errors, open_app


def test_the_designer_says_a_schedule_nested_too_deep_in_its_error_box(model_dir):
    at = open_app()
    shape = at.session_state["shape"]
    deep = "[" * 200_000 + "]" * 200_000
    upload = at.file_uploader(key="design_file")
    upload.set_value(("deep.json", deep.encode(), "application/json")).run()
    said = errors(at)  # no exception on the page
    assert "deep.json: cannot read it: nested deeper than a JSON reader follows" in said, said
    assert at.session_state["shape"] == shape


def test_the_designers_upload_box_takes_the_limit_every_upload_box_says(model_dir):
    """The designer's box took Streamlit's own 200 MB while the other pages' said the dashboard's limit."""
    from app.dashboard import paths

    at = open_app()
    assert at.file_uploader(key="design_file").proto.max_upload_size_mb == paths.upload_limit_mb()
