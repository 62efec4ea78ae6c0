"""The systemd_quote filter: what it writes, read back here the way systemd reads it (env-file.c for
EnvironmentFile=, systemd.syntax(7) specifiers, systemd.service(5) command-line words), gives the value given;
values systemd would misread are refused naming the variable."""

from __future__ import annotations

import re

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.filter.systemd_quote import FilterModule

systemd_quote = FilterModule().filters()["systemd_quote"]

VALUES = ["plain", "with spaces, commas", 'double " quote', "single ' quote", "back\\slash", "trailing\\",
          "back`tick`", "$HOME and ${PATH}", "100%", "#not a comment", "=", "", "ünïcødé", 8, 0.9, True]


def read_env_file(text):
    """systemd's EnvironmentFile= parser for lines KEY="value" (env-file.c, double-quoted state): a backslash
    before one of " \\ ` $ gives that character, before a newline joins the lines, before anything else is kept."""
    out = {}
    for match in re.finditer(r'^([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.|\\\n)*)"$', text, re.M):
        value, chars, i = match.group(2), [], 0
        while i < len(value):
            if value[i] == "\\" and i + 1 < len(value):
                nxt = value[i + 1]
                if nxt in '"\\`$':
                    chars.append(nxt)
                elif nxt != "\n":
                    chars.extend(["\\", nxt])
                i += 2
            else:
                chars.append(value[i])
                i += 1
        out[match.group(1)] = "".join(chars)
    return out


def unit_value(text):
    """A unit setting's value after specifier expansion of %% (systemd.syntax(7))."""
    return re.sub(r"%(.)", lambda m: m.group(1) if m.group(1) == "%" else "<specifier>", text)


def exec_word(text):
    """One double-quoted word of ExecStart= (C escapes \\\\ and \\"), then $$ and %% made single."""
    assert text.startswith('"') and text.endswith('"')
    body = re.sub(r'\\(["\\])', r"\1", text[1:-1])
    return unit_value(body.replace("$$", "$"))


def as_text(value):
    return ("1" if value else "0") if isinstance(value, bool) else str(value)


def test_env_file_reads_back_every_value():
    mapping = {f"V{i}": value for i, value in enumerate(VALUES)}
    mapping["SKIPPED"] = None
    text = systemd_quote(mapping, "env_file", name="vllm_service_env")
    assert text.endswith("\n") and text.count("\n") == len(VALUES)
    assert read_env_file(text) == {key: as_text(value) for key, value in mapping.items() if value is not None}


def test_documented_example():
    text = systemd_quote({"OMP_NUM_THREADS": 8, "HCCL_SOCKET_IFNAME": "eth0"}, "env_file", name="ray_cluster_env")
    assert text == 'HCCL_SOCKET_IFNAME="eth0"\nOMP_NUM_THREADS="8"\n'


def test_the_four_characters_are_escaped_by_a_backslash():
    # DOCUMENTATION: double-quoted, with the double quote, backslash, backquote and dollar sign escaped (the file
    # then also reads back the same when a shell sources it)
    assert systemd_quote({"A": 'q"b\\t`d$'}, "env_file", name="n") == 'A="q\\"b\\\\t\\`d\\$"\n'


@pytest.mark.parametrize("path", ["/etc/ascendai/vllm.env", "/etc/ascend ai/vllm.env", "/srv/100%/a$b/c\"d\\e",
                                  "/opt/ünï/x", "/"])
def test_paths_read_back(path):
    assert unit_value(systemd_quote(path, "path", name="p")) == path
    assert exec_word(systemd_quote(path, "exec_path", name="p")) == path


@pytest.mark.parametrize("text", ["vLLM on 8 NPUs at 90% memory", "a \\ b", "x"])
def test_text_reads_back(text):
    assert unit_value(systemd_quote(text, "text", name="d")) == text


def test_plain_secret_is_returned_as_is():
    assert systemd_quote("sk-AbC_123.xyz~!", "env_plain", name="vllm_api_key") == "sk-AbC_123.xyz~!"


@pytest.mark.parametrize("value,kind,name,needle", [
    ({"A": "x\ny"}, "env_file", "vllm_service_env", r"vllm_service_env \(A\)='x\\ny' holds the control character"),
    ({"1A": "x"}, "env_file", "vllm_service_env", "vllm_service_env: '1A' is not an environment variable name"),
    ({"A": [1]}, "env_file", "vllm_service_env", r"vllm_service_env \(A\): give a string or a number, not list"),
    ("A=x", "env_file", "vllm_service_env", "vllm_service_env: give a mapping of variable name to value, not str"),
    ("relative/dir", "path", "vllm_service_config_dir", "vllm_service_config_dir='relative/dir' is not an absolute"),
    ("/etc/a/../b", "path", "vllm_service_config_dir", "is not in its simplest form"),
    ("/etc/a/", "exec_path", "vllm_venv", "vllm_venv='/etc/a/' is not in its simplest form"),
    ("/etc/a\\", "path", "d", r"ends in a backslash"),
    (" lead", "text", "vllm_service_description", "vllm_service_description=' lead' starts or ends with a blank"),
    ("tab\there", "text", "vllm_service_description", "holds the control character"),
])
def test_bad_values_name_the_variable(value, kind, name, needle):
    with pytest.raises(AnsibleFilterError, match=rf"^systemd_quote: .*{needle}.*\. Nothing was written with it\.$"):
        systemd_quote(value, kind, name=name)


@pytest.mark.parametrize("secret", ["has space", 'quo"te', "back\\slash", "ünï", "new\nline", ""])
def test_bad_plain_secret_is_never_shown(secret):
    with pytest.raises(AnsibleFilterError, match=r"^systemd_quote: vllm_api_key[ =]") as info:
        systemd_quote(secret, "env_plain", name="vllm_api_key")
    if secret:
        assert secret not in str(info.value)


def test_secret_env_file_value_is_not_shown():
    with pytest.raises(AnsibleFilterError, match=r"the value is secret and not shown") as info:
        systemd_quote({"VLLM_API_KEY": "abc\ndef"}, "env_file", name="vllm_api_key", secret=True)
    assert "abc" not in str(info.value)


@pytest.mark.parametrize("kind", ["env", "unit", None, 1])
def test_unknown_kind_is_named(kind):
    with pytest.raises(AnsibleFilterError, match=rf"^systemd_quote: kind={re.escape(repr(kind))} is not one of "
                                                 r"env_file, env_plain, path, exec_path, text$"):
        systemd_quote("x", kind, name="v")


@pytest.mark.parametrize("secret", ["false", "no", 0, None, [True]])
def test_secret_that_is_not_a_boolean_is_refused(secret):
    # bool('false') is True: a text is refused rather than read as its truth
    with pytest.raises(AnsibleFilterError, match=rf"^systemd_quote: secret={re.escape(repr(secret))} must be true or "
                                                 r"false \(whether the value may be shown in messages\)$"):
        systemd_quote({"A": "1"}, "env_file", name="v", secret=secret)
