"""The compat_row filter against vllm-ascend's own documents (tests/unit/fixtures/vllm-ascend-releases): the row of
the newest versioning_policy.md that lists a release, and the torch-npu pin of its PyPI wheel's METADATA."""

from __future__ import annotations

import os
import re
import tarfile

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.filter.compat_row import FilterModule

compat_row = FilterModule().filters()["compat_row"]

ARCHIVE = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "vllm-ascend-releases",
                       "vllm-ascend-releases.tar.xz")
NEWEST_DOC = "0.30.0rc2/versioning_policy.md"


def member(name):
    with tarfile.open(ARCHIVE) as tar:
        return tar.extractfile(name).read().decode("utf-8")


def doc_row(release):
    """vLLM, Python, CANN, torch and torch_npu of ``release`` in the newest release's compatibility matrix."""
    for line in member(NEWEST_DOC).splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if cells[0] == f"v{release}":
            torch, torch_npu = (part.strip() for part in cells[4].split("/"))
            low, high = re.fullmatch(r">= (3\.\d+), < 3\.(\d+)", cells[2]).groups()
            return {"vllm": cells[1].lstrip("v"), "python": f"{low}-3.{int(high) - 1}", "cann": [cells[3]],
                    "torch": torch, "torch_npu": torch_npu}
    raise AssertionError(f"v{release} is not in {NEWEST_DOC}")


@pytest.mark.parametrize("release", ["0.11.0", "0.18.0", "0.23.0"])
def test_row_is_the_newest_documents_row(release):
    row = compat_row(release)
    expected = doc_row(release)
    assert {key: row[key] for key in expected} == expected
    assert row["label"] == f"v{release}" and row["final"] is True
    # installers pin torch-npu to the release, the wheel picks the build: 2.7.1.post1 -> 2.7.1.*
    assert row["torch_npu_pin"] == re.match(r"\d+\.\d+\.\d+", expected["torch_npu"]).group() + ".*"
    required = re.search(r"^Requires-Dist: torch-npu==(\S+)$", member(f"{release}/METADATA"), re.M).group(1)
    assert row["torch_npu_required"] == required


def test_v_prefix_partial_and_post_release():
    assert compat_row("v0.11.0")["vllm_ascend"] == "0.11.0"
    assert compat_row(" 0.11.0 ")["vllm_ascend"] == "0.11.0"
    # a partial version is the newest final release starting with it
    assert compat_row("0.23")["label"] == "v0.23.0"
    assert compat_row("0.23.0.post1")["label"] == "v0.23.0.post1"


def test_latest_follows_glibc_cann_and_the_bundled_releases():
    newest = compat_row("latest")
    assert newest["final"] is True and newest["aarch64_wheels"]
    # EXAMPLES: Kylin V10 (glibc 2.28) gets v0.18.0
    assert compat_row("latest", glibc="2.28")["label"] == "v0.18.0"
    assert compat_row("LATEST", available=["0.11.0", "v0.13.0"])["label"] == "v0.13.0"
    assert compat_row("latest", cann="8.3.RC2")["label"] == "v0.11.0"
    assert "8.3.RC2" in doc_row("0.11.0")["cann"]


@pytest.mark.parametrize("version,kwargs,needle", [
    (0.11, {}, "must be a quoted version string, got 0.11"),
    (True, {}, "must be a quoted version string, got True"),
    (None, {}, "must be a quoted version string, got None"),
    ("0.5.0", {}, "vllm-ascend 0.5.0 is not in the compatibility table; known releases: v0.7.1rc1, "),
    ("not-a-version", {}, "not a version: 'not-a-version'"),
    ("0.30", {}, r"vllm-ascend 0.30 matches 2 rows \(v0.30.0rc1, v0.30.0rc2\)"),
    ("0.11.0", {"glibc": "2.28"}, "glibc, cann and available go with 'latest' only"),
    ("latest", {"available": "0.11.0"}, "available must be a list of vllm-ascend releases, got '0.11.0'"),
    ("latest", {"available": []}, r"no final vllm-ascend release installs among the bundled releases \(none\)"),
    ("latest", {"glibc": "2.12"}, r"no final vllm-ascend release installs on glibc 2.12; pin vllm_ascend_version"),
    # no number is read as a version (an unquoted glibc 2.30 is the float 2.3)
    ("latest", {"glibc": 2.30}, r"glibc=2\.3 is not a version string; quote it in YAML, e\.g\. '2\.28' \(an unquoted "
                                r"2\.30 is the number 2\.3\)$"),
    ("latest", {"glibc": ["2.28"]}, r"glibc=\['2\.28'\] is not a version string"),
    ("latest", {"cann": 8.5}, r"cann=8\.5 is not a version string; quote it in YAML, e\.g\. '8\.5\.1'"),
    ("latest", {"cann": True}, r"cann=True is not a version string"),
    ("latest", {"available": ["0.11.0", 0.18]}, r"available must be a list of vllm-ascend releases \(quoted version "
                                                r"strings\), got \['0\.11\.0', 0\.18\]$"),
    ("latest", {"available": [None]}, r"available must be a list of vllm-ascend releases \(quoted version strings\)"),
])
def test_bad_input_is_named(version, kwargs, needle):
    with pytest.raises(AnsibleFilterError, match=rf"^compat_row: .*{needle}"):
        compat_row(version, **kwargs)
