"""tests/tools/request_stream.py: the stream stops when told or at its bound, counts every failure (the client's
own retries are off), and its percentiles are nearest-rank."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import types

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
SPEC = importlib.util.spec_from_file_location("request_stream",
                                              os.path.join(ROOT, "tests", "tools", "request_stream.py"))
stream = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(stream)


class _Client:
    """Answers from a script: 'ok', 'empty' (no tokens) or an exception; touches stop_file after ``stop_after``."""

    def __init__(self, script, stop_file=None, stop_after=None):
        self.script, self.calls, self.stop_file, self.stop_after = list(script), 0, stop_file, stop_after
        self.completions = types.SimpleNamespace(create=self._create)

    def _create(self, **_kwargs):
        self.calls += 1
        if self.stop_file and self.calls == self.stop_after:
            open(self.stop_file, "w").close()
        step = self.script[(self.calls - 1) % len(self.script)]
        if isinstance(step, Exception):
            raise step
        tokens = 0 if step == "empty" else 3
        return types.SimpleNamespace(choices=[object()], usage=types.SimpleNamespace(completion_tokens=tokens))


def _args(tmp_path, **kw):
    base = {"model": "m", "max": 50, "interval": 0, "stop_file": str(tmp_path / "stop")}
    return argparse.Namespace(**dict(base, **kw))


def test_it_stops_at_the_stop_file_and_counts_every_failure(tmp_path):
    client = _Client(["ok", ConnectionError("refused"), "empty", "ok"], stop_file=str(tmp_path / "stop"),
                     stop_after=6)
    requests = stream.run(_args(tmp_path), client, sleep=lambda _s: None)
    assert len(requests) == 6
    result = stream.summary(requests)
    assert (result["sent"], result["ok"], result["failed"]) == (6, 3, 3)
    assert result["first_failures"][0]["error"].startswith("ConnectionError: refused")
    assert result["first_failures"][1]["error"] == "no tokens"


def test_it_is_bounded_without_a_stop_file(tmp_path):
    client = _Client(["ok"])
    assert len(stream.run(_args(tmp_path, max=7), client, sleep=lambda _s: None)) == 7


def test_a_stop_file_present_at_start_still_lets_one_request_go(tmp_path):
    (tmp_path / "stop").touch()
    assert len(stream.run(_args(tmp_path), _Client(["ok"]), sleep=lambda _s: None)) == 1


@pytest.mark.parametrize("values,fraction,want", [
    ([], 0.99, None), ([5.0], 0.99, 5.0), (list(range(1, 101)), 0.99, 99), (list(range(1, 101)), 0.5, 50),
    (list(range(1, 201)), 0.99, 198), ([3, 1, 2], 0.99, 3)])
def test_percentiles_are_nearest_rank(values, fraction, want):
    assert stream.percentile(values, fraction) == want


def test_the_result_says_whether_the_stop_file_or_the_bound_ended_it(tmp_path, monkeypatch):
    """main(): 'stop-file' when the stream ran until told (it covered what it ran beside), 'max' at its bound."""
    key = tmp_path / "key"
    key.write_text("k\n")
    for stop_after, want in ((3, "stop-file"), (None, "max")):
        out = tmp_path / f"out-{want}.json"
        client = _Client(["ok"], stop_file=str(tmp_path / f"stop-{want}"), stop_after=stop_after)
        fake_openai = types.SimpleNamespace(OpenAI=lambda c=client, **_kw: c)
        monkeypatch.setitem(sys.modules, "openai", fake_openai)
        monkeypatch.setattr(stream.time, "sleep", lambda _s: None)
        stream.main(["--url", "http://x/v1", "--key-file", str(key), "--model", "m", "--out", str(out),
                     "--stop-file", str(tmp_path / f"stop-{want}"), "--max", "5", "--interval", "0"])
        result = json.loads(out.read_text())
        assert result["stopped_by"] == want, result
        assert result["sent"] == (3 if want == "stop-file" else 5)
