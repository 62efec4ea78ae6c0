# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""The collection's sources live in the project: no file cites the research notes beside the checkout.

Code, messages and docs cite public URLs or ``docs/sources.md``; a reference to a section of
``docs/sources.md`` by name (``docs/sources.md, "Section"``) must name a heading that exists.
"""

import os
import re
import subprocess

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SOURCES = os.path.join(ROOT, "docs", "sources.md")

# What points outside the project: the research notes and the environment notes of the workplace.
_OUTSIDE = re.compile(r"\.\./shared/|shared/(?:research|fixtures|environment)|ascend-facts")
_SECTION_REF = re.compile(r'docs/sources\.md, "([^"]+)"')
_SKIP_PREFIXES = ("tests/unit/fixtures/", "docs/roles/")
_THIS = os.path.relpath(__file__, ROOT)


def _project_files():
    try:
        out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, check=True,
                             capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    for rel in out.splitlines():
        if rel.startswith(_SKIP_PREFIXES) or rel == _THIS:
            continue
        path = os.path.join(ROOT, rel)
        if not os.path.isfile(path) or os.path.getsize(path) > 2_000_000:
            continue
        try:
            with open(path, encoding="utf-8") as handle:
                yield rel, handle.read()
        except UnicodeDecodeError:
            continue


def test_no_file_cites_the_notes_outside_the_project():
    offenders = []
    for rel, text in _project_files():
        for number, line in enumerate(text.splitlines(), 1):
            if _OUTSIDE.search(line):
                offenders.append(f"{rel}:{number}: {line.strip()[:100]}")
    assert not offenders, ("cite a public URL or docs/sources.md instead of the notes outside the project:\n"
                           + "\n".join(offenders))


def test_section_references_name_existing_sections():
    with open(SOURCES, encoding="utf-8") as handle:
        headings = {line.lstrip("#").strip() for line in handle if line.startswith("#")}
    missing = []
    for rel, text in _project_files():
        for name in _SECTION_REF.findall(text):
            if name not in headings:
                missing.append(f"{rel}: \"{name}\"")
    assert not missing, "docs/sources.md has no such section:\n" + "\n".join(missing)


def test_the_check_finds_a_citation(tmp_path):
    assert _OUTSIDE.search("see ../shared/research/ascend-facts.md section 6")
    assert _OUTSIDE.search("(shared/fixtures/npu-smi)")
    assert not _OUTSIDE.search("see docs/sources.md, \"CANN\"")
