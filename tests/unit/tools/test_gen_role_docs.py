"""docs/roles/*.md are generated from the roles' argument specs and must be up to date."""

from __future__ import annotations

import importlib.util
import os

import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
_SPEC = importlib.util.spec_from_file_location("gen_role_docs",
                                               os.path.join(ROOT, "tools", "generate", "gen_role_docs.py"))
gen = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(gen)


def test_committed_role_docs_are_up_to_date(capsys):
    rc = gen.main(["--check"])
    assert rc == 0, capsys.readouterr().err


def test_generation_is_deterministic_and_covers_every_role():
    first, second = gen.pages(), gen.pages()
    assert first == second
    roles = sorted(d for d in os.listdir(os.path.join(ROOT, "roles"))
                   if os.path.isfile(os.path.join(ROOT, "roles", d, "meta", "argument_specs.yml")))
    assert sorted(os.path.basename(p)[:-3] for p in first) == roles


def test_page_lists_every_option_with_type_default_and_choices():
    with open(os.path.join(ROOT, "roles", "k8s_manifests", "meta", "argument_specs.yml"), encoding="utf-8") as fh:
        specs = yaml.safe_load(fh)
    page = gen.render("k8s_manifests", specs)
    rows = [line for line in page.splitlines() if line.startswith("| `")]
    top = [r for r in rows if "[]." not in r.split("|")[1]]
    assert [r.split("`")[1] for r in top] == list(specs["argument_specs"]["main"]["options"])
    assert "| `k8s_manifests_npus` | int | `8` |" in page
    assert "| `k8s_manifests_gpu_memory_utilization` | float | `0.9` |" in page
    assert "Choices: `ClusterIP`, `NodePort`, `LoadBalancer`." in page
    assert "| `k8s_manifests_driver_mounts[].path` | str |  |" in page
    assert "O(" not in page and "C(" not in page


def test_markup_conversion():
    assert gen.markup("O(a=b) V(x) C(y) E(Z) P(ascendai.vllm.npu_info#module) I(it) B(bold)") == \
        "`a=b` `x` `y` `Z` `ascendai.vllm.npu_info` (module) *it* **bold**"
    assert gen.markup("L(the docs, https://x.y/z) U(https://a.b)") == "[the docs](https://x.y/z) <https://a.b>"


def test_check_reports_a_stale_page(tmp_path, capsys):
    role = tmp_path / "roles" / "demo" / "meta"
    role.mkdir(parents=True)
    (role / "argument_specs.yml").write_text(yaml.safe_dump({"argument_specs": {"main": {
        "short_description": "Demo", "options": {"demo_port": {"type": "int", "default": 80, "description": "P"}}}}}))
    assert gen.main(["--root", str(tmp_path), "--check"]) == 1
    assert "docs/roles/demo.md is missing" in capsys.readouterr().err
    assert gen.main(["--root", str(tmp_path)]) == 0
    assert gen.main(["--root", str(tmp_path), "--check"]) == 0
    (role / "argument_specs.yml").write_text((role / "argument_specs.yml").read_text().replace("80", "81"))
    assert gen.main(["--root", str(tmp_path), "--check"]) == 1
    assert "docs/roles/demo.md is out of date" in capsys.readouterr().err
