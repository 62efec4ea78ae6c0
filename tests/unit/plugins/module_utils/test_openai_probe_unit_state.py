"""The health gate's reading of a systemd unit (parse_systemctl_show, unit_stopped).

The captures under fixtures/systemctl_show/ are real `systemctl show UNIT --property=...` outputs (systemd 252 of the
sandbox's Debian 12 node, tests/unit/plugins/module_utils/fixtures/systemctl_show/README.md says how each was
made)."""

from __future__ import annotations

import os

from ansible_collections.ascendai.vllm.plugins.module_utils._openai_probe import (
    UNIT_PROPERTIES,
    parse_systemctl_show,
    unit_stopped,
)
from hypothesis import given
from hypothesis import strategies as st

HERE = os.path.join(os.path.dirname(__file__), "fixtures", "systemctl_show")


def _capture(name):
    with open(os.path.join(HERE, name), encoding="utf-8") as handle:
        return parse_systemctl_show(handle.read())


def test_a_unit_crashing_at_every_start_is_stopped_once_past_the_restarts_allowed():
    props = _capture("crashing.txt")
    assert set(props) == set(UNIT_PROPERTIES)
    restarts = int(props["NRestarts"])
    assert restarts >= 1 and props["ActiveState"] in ("activating", "failed")
    if props["ActiveState"] == "activating":
        assert unit_stopped(props, "crash.service", restarts) is None
    message = unit_stopped(props, "crash.service", restarts - 1)
    assert message and "crash.service" in message and "journalctl -u crash.service" in message
    assert "exit status 3" in message
    # the restarts counted are those since the gate began
    assert unit_stopped(props, "crash.service", 0, restarts_before=restarts) is None
    assert unit_stopped(props, "crash.service", 0, restarts_before=restarts - 1)
    # the counter went back below the baseline (a stop and start): all of its restarts count
    assert unit_stopped(props, "crash.service", restarts - 1, restarts_before=restarts + 5)


def test_a_running_unit_is_not_stopped():
    props = _capture("running.txt")
    assert props["ActiveState"] == "active" and props["NRestarts"] == "0"
    assert unit_stopped(props, "ok.service", 0) is None


def test_a_stopped_unit_and_one_systemd_gave_up_on():
    assert "is not running" in unit_stopped(_capture("inactive.txt"), "off.service", 3)
    message = unit_stopped(_capture("start-limit.txt"), "limit.service", 10)
    assert "limit.service has failed" in message and "exit status 3" in message


def test_nothing_readable_means_keep_waiting():
    assert unit_stopped({}, "x.service", 0) is None
    assert unit_stopped(parse_systemctl_show("garbage\n\n= =\n"), "x.service", 0) is None
    assert unit_stopped({"ActiveState": "activating", "NRestarts": "n/a"}, "x.service", 0) is None


@given(st.dictionaries(st.sampled_from(UNIT_PROPERTIES),
                       st.text(alphabet=st.characters(blacklist_characters="\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"),
                               max_size=20)))
def test_parse_round_trips_what_systemctl_prints(props):
    text = "".join(f"{key}={value}\n" for key, value in props.items())
    assert parse_systemctl_show(text) == props
    unit_stopped(props, "x.service", 3)  # never raises


@given(st.text(max_size=200), st.integers(min_value=0, max_value=10))
def test_any_text_never_raises(text, limit):
    result = unit_stopped(parse_systemctl_show(text), "x.service", limit)
    assert result is None or "x.service" in result
