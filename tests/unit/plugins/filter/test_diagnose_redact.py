"""The diagnose_redact filter: the forms DOCUMENTATION lists lose their secret values, everything else is kept."""

from __future__ import annotations

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.filter.diagnose_redact import DOCUMENTATION, RETURN, FilterModule

diagnose_redact = FilterModule().filters()["diagnose_redact"]

R = "<redacted>"


@pytest.mark.parametrize("text,expected", [
    # KEY=value and a systemd Environment= line with spaces and commas in the value
    ("VLLM_API_KEY=abc\nVLLM_PORT=8000\n", f"VLLM_API_KEY={R}\nVLLM_PORT=8000\n"),
    ('Environment="VLLM_API_KEY=abc def, ghi"\nEnvironment="VLLM_PORT=8000"\n',
     f'Environment="VLLM_API_KEY={R}"\nEnvironment="VLLM_PORT=8000"\n'),
    # --api-key value on a command line; --tokenizer is kept
    ("vllm serve /models/m --api-key sk-abc123 --tokenizer /models/tok --port 8000",
     f"vllm serve /models/m --api-key {R} --tokenizer /models/tok --port 8000"),
    # key: value in any case style; keys merely containing a word such as "token" are kept
    ("accessToken: s3cr3t\nClientSecret: s3cr3t\nOBS_SK=AAAA\nmax_num_batched_tokens: 8192\ntokenizer: /m/tok\n",
     f"accessToken: {R}\nClientSecret: {R}\nOBS_SK={R}\nmax_num_batched_tokens: 8192\ntokenizer: /m/tok\n"),
    # Authorization header with a bearer token, password in a URL, curl -u user:password
    ("Authorization: Bearer abcdef0123456789\n", f"Authorization: Bearer {R}\n"),
    ("index-url = https://user:pa55w0rd@mirror.example.com/simple\n",
     f"index-url = https://user:{R}@mirror.example.com/simple\n"),
    ("curl -u admin:hunter2 http://127.0.0.1:8000/v1/models", f"curl -u admin:{R} http://127.0.0.1:8000/v1/models"),
    # nothing secret: unchanged
    ("", ""),
    ("INFO: Started server process [1234]\n", "INFO: Started server process [1234]\n"),
])
def test_secret_values_are_replaced(text, expected):
    assert diagnose_redact(text) == expected


def test_tokens_and_private_keys_leave_no_trace():
    secrets = ["hf_abcdefghijklmnopqrstuvwxyz123456", "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC"]
    text = (f"HF_TOKEN={secrets[0]}\n-----BEGIN PRIVATE KEY-----\n{secrets[1]}\n-----END PRIVATE KEY-----\n"
            "VLLM_PORT=8000\n")
    out = diagnose_redact(text)
    assert not any(secret in out for secret in secrets)
    assert out.count(R) == 2 and out.endswith("VLLM_PORT=8000\n")


@pytest.mark.parametrize("value,kind", [(b"VLLM_API_KEY=x", "bytes"), (5, "int"), ({"VLLM_API_KEY": "x"}, "dict"),
                                        (["VLLM_API_KEY=x"], "list")])
def test_input_that_is_not_text_is_named(value, kind):
    with pytest.raises(AnsibleFilterError, match=rf"^diagnose_redact: the input must be text \(a string, e\.g\. the "
                                                 rf"decoded content of a file\), got {kind}: "):
        diagnose_redact(value)


def test_none_passes_through_as_documented():
    assert diagnose_redact(None) is None
    doc = yaml.safe_load(DOCUMENTATION)
    assert "None" in doc["options"]["_input"]["description"] and "passes through" in " ".join(doc["description"])
    assert "None" in yaml.safe_load(RETURN)["_value"]["description"]


@pytest.mark.parametrize("value", [{"VLLM_API_KEY": "sk-secret-1234"}, ["VLLM_API_KEY=sk-secret-1234"],
                                   b"VLLM_API_KEY=sk-secret-1234", 5])
def test_a_wrong_input_names_the_fix_and_never_shows_the_value(value):
    with pytest.raises(AnsibleFilterError) as err:
        diagnose_redact(value)
    message = str(err.value)
    assert "sk-secret-1234" not in message   # the value is bound for redaction: it is not printed
    assert message.endswith(f"got {type(value).__name__}: its value is not shown, as it may hold secrets. Pass the "
                            "text, e.g. slurp's content | b64decode, or a list of lines joined with join('\\n'); None "
                            "passes through as None."), message
