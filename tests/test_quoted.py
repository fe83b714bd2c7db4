"""A refusal quotes the value it refuses in one line whatever its size (`errors.quoted`): a pasted page of text or a
file's list of thousands was quoted whole, a message of pages in a terminal and on the dashboard."""

from __future__ import annotations

import pytest

from skipcore.decode.sampling import Sampling
from skipcore.errors import UserError, quoted
from skipcore.evaluate.tune.settings import TuneSettings, check_settings
from skipcore.schedule import Schedule, ScheduleError
from skipcore.training.settings import TrainSettings
from tests.helpers import refused

LONG = "9" * 5000


def test_a_value_is_quoted_whole_where_short_and_by_its_ends_where_long():
    assert quoted("abc") == "'abc'" and quoted(12) == "12" and quoted([12, 8.5, "x"]) == "[12, 8.5, 'x']"
    assert quoted((1, 2)) == "[1, 2]"
    assert quoted("a" * 50 + "b" * 50) == repr("a" * 40 + "..." + "b" * 40)
    assert quoted(list(range(5000))) == "[0, 1, 2, 3, 4, 5, ..., 4998, 4999] (5000 values)"
    assert quoted([LONG, 3]) == f"[{quoted(LONG)}, 3]"  # each item quoted the same way
    assert quoted([list(range(100))]) == "[[0, 1, 2, 3, 4, 5, ..., 98, 99] (100 values)]"
    assert quoted(10**5000) == "an int too long to show"  # past Python's 4300 digits of text: no ValueError
    long_dict = quoted({i: i for i in range(1000)})
    assert (
        long_dict.startswith("{0: 0, 1: 1,") and long_dict.endswith("998, 999: 999}") and len(long_dict) < 90
    )


@pytest.mark.parametrize(
    "refuse",
    [
        lambda: Schedule.from_dict({"num_layers": 12, "shape": "linear", "max_layers": LONG}),
        lambda: Schedule.from_dict({"num_layers": 12, "shape": "custom", "budgets_list": LONG}),
        lambda: Schedule.from_dict({"num_layers": 12, "shape": "custom", "budgets_list": [LONG, 3]}),
        lambda: Sampling(temperature=LONG),
        lambda: check_settings(TuneSettings(out="o", trials=LONG)),
        lambda: check_settings(TuneSettings(out="o", shapes=[LONG])),
        lambda: TrainSettings(model="m", out="o", steps=LONG).check(),
    ],
)
def test_the_librarys_refusals_quote_a_long_value_in_a_line(refuse):
    with pytest.raises((UserError, ScheduleError)) as refused:
        refuse()
    assert LONG not in str(refused.value) and len(str(refused.value)) < 200, str(refused.value)[:300]


@pytest.mark.parametrize("flag", ["--budgets", "--temperature"])
def test_a_long_flag_value_is_said_in_a_line(capsys, flag):
    said = refused(capsys, ["generate", flag, "x" * 5000])
    assert flag in said and "x" * 100 not in said and len(said) < 200, said[:300]


@pytest.mark.parametrize(
    "argv",
    [
        ["bench", "--batch-sizes", "1,,2"],
        ["bench", "--targets", "1,x"],
        ["sweep", "--out", "o", "--calm-thresholds", ","],
        ["tune", "--out", "o", "--shapes", "linear,"],
        ["train", "--out", "o", "--whole-layers", "1,y"],
    ],
)
def test_a_list_flag_is_named_once(capsys, argv):
    """argparse says 'argument --batch-sizes:' in front; the refusal after it said the flag again."""
    said = refused(capsys, argv)
    assert said.count(argv[-2]) == 1, said
