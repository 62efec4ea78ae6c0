"""Redaction of secrets in support-bundle texts (plugins/module_utils/_diagnose.py ``redact``), by class of leak.

Each class is tested with fixed examples and with Hypothesis: random secret values (commas, quotes, spaces,
escaped quotes, long values), random key casings and separators. The secret is built from chunks that start with
``Q`` (the surrounding text never holds one), so a leaked tail shows as a chunk in the output.
"""

import os
import re
import subprocess
import sys
import time

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from ansible_collections.ascendai.vllm.plugins.module_utils._diagnose import REDACTED, is_secret_key, redact

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))


def _chunks(secret):
    return re.findall(r"Q[A-Za-z0-9]{5,}", secret)


def assert_hidden(out, secret, keep=()):
    for chunk in _chunks(secret) or [secret]:
        assert chunk not in out, f"{chunk!r} of the secret survives in {out[:400]!r}"
    for text in keep:
        assert text in out, f"{text!r} was lost: {out[:400]!r}"
    assert redact(out) == out, "redacting twice changes the text"


# --------------------------------------------------------------------------- strategies

_chunk = st.from_regex(r"Q[A-Za-z0-9]{6,12}", fullmatch=True)


def _value(separators, min_chunks=1, max_chunks=5):
    """A secret: chunks joined by the given separators."""
    return st.builds(
        lambda chunks, seps: "".join(c + (seps[i % len(seps)] if i < len(chunks) - 1 else "")
                                     for i, c in enumerate(chunks)),
        st.lists(_chunk, min_size=min_chunks, max_size=max_chunks),
        st.lists(st.sampled_from(separators), min_size=1, max_size=4))


# separators a value may hold inside double quotes (escaped quote included), single quotes, and bare (shell/env)
_DQ_SEPS = [",", " ", "\\\"", ";", "=", ":", "/", "+", "'", "#", "&", "\\\\", "@", "{", "}", "[", "]", ", ", "; "]
_SQ_SEPS = [",", " ", ";", "=", ":", "/", "+", "\"", "#", "&", "@", ", ", "; "]
_BARE_SEPS = [",", "=", ":", "/", "+", "@", "%", "!", "*", "~", ".", "-", "_", "\\\"", "\\ ", "(", "$"]

_WORDS = [("api", "key"), ("access", "token"), ("client", "secret"), ("db", "password"), ("hf", "token"),
          ("secret", "access", "key"), ("private", "key"), ("refresh", "token"), ("auth", "token"),
          ("huaweicloud", "sdk", "sk"), ("obs", "sk"), ("x", "api", "key"), ("session", "cookie"), ("passwd",),
          ("token",), ("password",), ("secret",), ("credentials",), ("apikey",), ("sk",), ("auth",)]


def _case(words, style):
    if style == "snake":
        return "_".join(words)
    if style == "upper":
        return "_".join(words).upper()
    if style == "kebab":
        return "-".join(words)
    if style == "camel":
        return words[0] + "".join(w.capitalize() for w in words[1:])
    if style == "pascal":
        return "".join(w.capitalize() for w in words)
    if style == "dotted":
        return ".".join(words)
    if len(words) > 1 and words[-1] == "sk":  # OBSSK: "sk" ends too many words (disk, task) to be read flat
        return "_".join(words).upper()
    return "".join(words).upper()  # flat upper: APIKEY, ACCESSTOKEN


_STYLES = ["snake", "upper", "kebab", "camel", "pascal", "dotted", "flat"]
secret_keys = st.builds(_case, st.sampled_from(_WORDS), st.sampled_from(_STYLES))


# --------------------------------------------------------------------------- key names in any case style


@pytest.mark.parametrize("key", [
    "accessToken", "clientSecret", "AccessToken", "ClientSecret", "APIKey", "apiKey", "xApiKey", "X-Api-Key",
    "refreshToken", "ACCESSTOKEN", "apikey", "APIKEY", "dbPassword", "DB_PASS", "HUAWEICLOUD_SDK_SK", "OBS_SK",
    "sk", "SK", "ak", "secretAccessKey", "privateKey", "private_key", "auth", "Cookie", "Set-Cookie",
    "client-secret", "Authorization", "proxyAuthorization", "sessionKey", "storageAccountKey",
])
def test_secret_key_names_in_any_case_style(key):
    assert is_secret_key(key)


@pytest.mark.parametrize("key", [
    "tokenizer", "max_num_batched_tokens", "maxTokens", "author", "keyfile", "HCCL_BUFFSIZE", "disk", "task",
    "mask", "peakMemory", "passage", "tokenizerMode", "key", "monkey", "model", "port", "askTime",
])
def test_ordinary_names_are_kept(key):
    assert not is_secret_key(key)


@SETTINGS
@given(secret_keys)
def test_every_case_style_of_a_secret_word_is_secret(key):
    assert is_secret_key(key)


# --------------------------------------------------------------------------- long quoted values


def test_quoted_values_longer_than_512_characters():
    key = "Q" + "a1B2c3" * 500  # a service account's private key, a long JWT
    text = ('{"type": "service_account", "private_key": "' + key + '", "client_email": "sa@p.iam"}\n'
            f"api_key: '{key}'\nport: 8000\n")
    out = redact(text)
    assert key[:20] not in out and "a1B2c3a1B2" not in out
    assert '"client_email": "sa@p.iam"' in out and "port: 8000" in out


@SETTINGS
@given(secret_keys, st.integers(513, 5000), st.sampled_from(['"', "'"]), st.sampled_from([": ", "=", " = "]))
def test_long_quoted_values_of_any_length(key, length, quote, sep):
    secret = ("Q" + "x9Y" * length)[:length]
    out = redact(f"before=1 {quote}{key}{quote}{sep}{quote}{secret}{quote}, after=2\n")
    assert secret[:12] not in out and "x9Yx9Y" not in out
    assert "before=1" in out and "after=2" in out


# --------------------------------------------------------------------------- option and value as separate items


@pytest.mark.parametrize("text, keep", [
    ('["vllm", "serve", "/m", "--api-key", "QsEcret1x", "--port", "8000"]', '"--port", "8000"'),
    ("['vllm', 'serve', '--api-key', 'QsEcret1x', '--port', '8000']", "'--port', '8000'"),
    ('{"args":["--api-key","QsEcret1x","--port","8000"]}', '"--port","8000"'),
    ("args:\n  - --api-key\n  - QsEcret1x\n  - --port\n  - '8000'\n", "  - --port"),
    ("args:\n- \"--api-key\"\n- \"QsEcret1x\"\n- --port\n", "- --port"),
    ('args: ["--api-key", "QsEcret1x"]\nports: [8000]\n', "ports: [8000]"),
    ("ExecStart=/v/bin/vllm serve /m \\\n    --api-key \\\n    QsEcret1x \\\n    --port 8000\n", "--port 8000"),
    ("vllm serve --api_key QsEcret1x --port 8000", "--port 8000"),
    ("app -api-key QsEcret1x -port 8000", "-port 8000"),
    ('"command": [\n  "--hf-token",\n  "QsEcret1x",\n  "--model",\n  "m"\n]', '"--model"'),
])
def test_option_and_value_as_separate_items(text, keep):
    assert_hidden(redact(text), "QsEcret1x", [keep])


@SETTINGS
@given(st.sampled_from(["--api-key", "--hf-token", "--password", "--client-secret", "--access-token",
                        "--secret-key", "--sk"]),
       _value(["", "-", "_", ".", "/", "+", "=", ":", "@"]),
       st.sampled_from(["json", "python", "yaml", "yaml_quoted", "shell", "shell_continued", "equals"]))
def test_separate_option_items_hypothesis(option, secret, form):
    items = ["vllm", "serve", option, secret, "--port", "8000"]
    if form == "json":
        text = "[" + ", ".join(f'"{i}"' for i in items) + "]"
    elif form == "python":
        text = "[" + ", ".join(f"'{i}'" for i in items) + "]"
    elif form == "yaml":
        text = "args:\n" + "".join(f"  - {i}\n" for i in items)
    elif form == "yaml_quoted":
        text = "args:\n" + "".join(f"  - \"{i}\"\n" for i in items)
    elif form == "shell":
        text = " ".join(items)
    elif form == "shell_continued":
        text = " \\\n    ".join(items)
    else:
        text = f"vllm serve {option}={secret} --port 8000"
    assert_hidden(redact(text), secret, ["--port", "8000", "serve"])


# --------------------------------------------------------------------------- YAML values on the next line


@pytest.mark.parametrize("text, keep", [
    ("api_key:\n  QsEcret1x\nport: 8000\n", "port: 8000"),
    ("vllm:\n  apiKey:\n    \"QsEcret1x\"\n  port: 8000\n", "  port: 8000"),
    ("hf_token:\n  QsEcret1x\n  Qcontinued2\nmodel: /m\n", "model: /m"),
    ("credentials:\n- QsEcret1x\n- Qanother22\nmodel: /m\n", "model: /m"),
    ('{\n  "password":\n    "QsEcret1x",\n  "port": 8000\n}\n', '"port": 8000'),
    ("clientSecret: |\n  QsEcret1x\n  Qline2xxx\nport: 1\n", "port: 1"),
    ("- name: x\n  token: >-\n    QsEcret1x\n  port: 1\n", "  port: 1"),
    ('password: "QsEcret1x\n  Qcontinued2"\nport: 1\n', "port: 1"),
    ("credentials: {\n    user: QsEcret1x,\n    pass: Qanother22\n}\nport: 1\n", "port: 1"),
])
def test_yaml_values_on_later_lines(text, keep):
    out = redact(text)
    assert_hidden(out, "QsEcret1x Qcontinued2 Qanother22 Qline2xxx", [keep])


@SETTINGS
@given(secret_keys, _value([" ", ",", ":", "-", "#"]), st.sampled_from(["", "  ", "    "]),
       st.sampled_from(["plain", "dq", "sq", "literal", "folded", "seq"]))
def test_next_line_values_hypothesis(key, secret, indent, style):
    assume(not secret.endswith((" ", ":")) and ": " not in secret and " #" not in secret)
    inner = indent + "  "
    if style == "plain":
        body = f"{key}:\n{inner}{secret}\n"
    elif style == "dq":
        body = f"{key}:\n{inner}\"{secret}\"\n"
    elif style == "sq":
        body = f"{key}:\n{inner}'{secret}'\n"
    elif style == "literal":
        body = f"{key}: |\n{inner}{secret}\n{inner}{secret}\n"
    elif style == "folded":
        body = f"{key}: >-\n{inner}{secret}\n\n{inner}{secret}\n"
    else:
        body = f"{key}:\n{inner}- {secret}\n{inner}- {secret}\n"
    text = f"{indent}model: /m\n" + "".join(indent + line + "\n" if line else "\n"
                                            for line in body.splitlines()) + f"{indent}port: 8000\n"
    assert_hidden(redact(text), secret, ["model: /m", f"{indent}port: 8000"])


# --------------------------------------------------------------------------- quoted pairs: commas, escapes, spaces


@pytest.mark.parametrize("text, keep", [
    ('Environment="VLLM_API_KEY=QsEcret1x,Qtail2xxx" "HCCL_BUFFSIZE=200"', '"HCCL_BUFFSIZE=200"'),
    ('Environment="VLLM_API_KEY=QsEcret1x\\"Qtail2xxx" "HCCL_BUFFSIZE=200"', '"HCCL_BUFFSIZE=200"'),
    ('Environment="VLLM_API_KEY=QsEcret1x Qtail2xxx" "HCCL_BUFFSIZE=200"', '"HCCL_BUFFSIZE=200"'),
    ("Environment='HF_TOKEN=QsEcret1x Qtail2xxx' 'X=1'", "'X=1'"),
    ("Environment=VLLM_API_KEY=QsEcret1x\\ Qtail2xxx HCCL_BUFFSIZE=200", "HCCL_BUFFSIZE=200"),
    ("docker run -e API_KEY=QsEcret1x,Qtail2xxx --net=host img", "--net=host img"),
    ('docker run -e "API_KEY=QsEcret1x Qtail2xxx" img', " img"),
    ('{"password": "QsEcret1x\\"Qtail2xxx", "port": 8000}', '"port": 8000'),
    ("{'password': 'QsEcret1x\\'Qtail2xxx', 'port': 8000}", "'port': 8000"),
    ("password: 'QsEcret1x''Qtail2xxx'\nport: 1", "port: 1"),
    ('vllm serve "--api-key=QsEcret1x Qtail2xxx" --port 8000', "--port 8000"),
    ("https://h/p?access_token=QsEcret1x,Qtail2xxx&page=2", "&page=2"),
])
def test_quoted_pairs_keep_the_whole_value(text, keep):
    assert_hidden(redact(text), "QsEcret1x Qtail2xxx", [keep])


@SETTINGS
@given(secret_keys, _value(_DQ_SEPS), st.sampled_from(["Environment=", "env: ", "-e ", ""]))
def test_double_quoted_pair_hypothesis(key, secret, prefix):
    assume(not secret.endswith("\\"))
    text = f'{prefix}"{key}={secret}" "OTHER=keep1" next\n'
    assert_hidden(redact(text), secret, ['"OTHER=keep1" next'])


@SETTINGS
@given(secret_keys, _value(_SQ_SEPS))
def test_single_quoted_pair_hypothesis(key, secret):
    text = f"Environment='{key}={secret}' 'OTHER=keep1'\n"
    assert_hidden(redact(text), secret, ["'OTHER=keep1'"])


@SETTINGS
@given(secret_keys, _value(_DQ_SEPS), st.sampled_from([": ", ":", " : "]))
def test_json_value_with_escapes_hypothesis(key, secret, sep):
    assume(not secret.endswith("\\"))
    text = f'{{"model": "m", "{key}"{sep}"{secret}", "port": 8000}}'
    assert_hidden(redact(text), secret, ['"model": "m"', '"port": 8000}'])


@SETTINGS
@given(secret_keys, _value(_BARE_SEPS), st.sampled_from(["=", ": "]), st.sampled_from(["", "export ", "  "]))
def test_bare_values_hypothesis(key, secret, sep, prefix):
    assume(not (sep == ": " and secret.startswith(("|", ">", "-", "[", "{"))))
    out = redact(f"{prefix}{key}{sep}{secret}\nport=8000\nrun -e {key}={secret} --net=host img\n")
    assert_hidden(out, secret, ["port=8000", "--net=host img"])


# --------------------------------------------------------------------------- PEM private keys


_PEM_BODY = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC\nQpemLine2abcdefABCDEF0123456789\nQpemLine3zz==\n"


@pytest.mark.parametrize("kind", ["PRIVATE KEY", "RSA PRIVATE KEY", "EC PRIVATE KEY", "OPENSSH PRIVATE KEY",
                                  "ENCRYPTED PRIVATE KEY", "DSA PRIVATE KEY", "PGP PRIVATE KEY BLOCK"])
def test_pem_private_key_blocks(kind):
    text = f"before\n-----BEGIN {kind}-----\n{_PEM_BODY}-----END {kind}-----\nafter\n"
    out = redact(text)
    assert "MIIEvQ" not in out and "Qpem" not in out
    assert out.startswith("before\n-----BEGIN ") and out.endswith("-----\nafter\n")


def test_pem_keys_escaped_in_json_and_cut_off():
    one_line = _PEM_BODY.replace("\n", "\\n")
    out = redact('{"kid": "1", "key": "-----BEGIN PRIVATE KEY-----\\n' + one_line + '-----END PRIVATE KEY-----\\n"}')
    assert "MIIEvQ" not in out and "Qpem" not in out and '"kid": "1"' in out
    cut = redact("log line\n-----BEGIN RSA PRIVATE KEY-----\n" + _PEM_BODY)
    assert "MIIEvQ" not in cut and "Qpem" not in cut and cut.startswith("log line\n")
    cert = "-----BEGIN CERTIFICATE-----\nMIIcertificate\n-----END CERTIFICATE-----\n"
    assert redact(cert) == cert


@SETTINGS
@given(st.lists(_chunk, min_size=1, max_size=30), st.sampled_from(["\n", "\r\n", "\\n"]),
       st.sampled_from(["PRIVATE KEY", "RSA PRIVATE KEY", "OPENSSH PRIVATE KEY"]), st.text("ab \n", max_size=20))
def test_pem_hypothesis(lines, newline, kind, around):
    text = (f"x{around}y{newline}-----BEGIN {kind}-----{newline}" + newline.join(lines)
            + f"{newline}-----END {kind}-----{newline}z{around}w")
    out = redact(text)
    assert_hidden(out, " ".join(lines), [f"x{around}y", f"z{around}w"])


# --------------------------------------------------------------------------- netrc, curl -u


@pytest.mark.parametrize("text, keep", [
    ("machine mirror.example login ops password QsEcret1x\n", "machine mirror.example login ops password"),
    ("machine mirror.example\n  login ops\n  password QsEcret1x\nmachine b login u password Qtail2xxx\n",
     "machine b login u password"),
    ("default login anonymous password QsEcret1x", "default login anonymous"),
    ('machine h login u password "QsEcret1x Qtail2xxx" account x', "account x"),
    ("machine h login u passwd QsEcret1x", "machine h login u"),
])
def test_netrc(text, keep):
    assert_hidden(redact(text), "QsEcret1x Qtail2xxx", [keep])


@pytest.mark.parametrize("text, keep", [
    ("curl -u ops:QsEcret1x https://h/x", "curl -u ops:"),
    ("curl -u 'ops:QsEcret1x Qtail2xxx' https://h/x", "https://h/x"),
    ('curl --user "ops:QsEcret1x" -o f https://h/x', "-o f https://h/x"),
    ("curl --user=ops:QsEcret1x https://h/x", "https://h/x"),
    ("curl -sSfu ops:QsEcret1x https://h/x", "https://h/x"),
    ("curl -uops:QsEcret1x https://h/x", "https://h/x"),
    ("curl --proxy-user ops:QsEcret1x -x p https://h/x", "-x p https://h/x"),
    ("curl -U ops:QsEcret1x https://h/x", "https://h/x"),
])
def test_curl_user(text, keep):
    assert_hidden(redact(text), "QsEcret1x Qtail2xxx", [keep])


@SETTINGS
@given(st.sampled_from(["-u ", "--user ", "--user=", "-su ", "-U ", "--proxy-user "]), _value(_SQ_SEPS),
       st.sampled_from(["'", '"']), st.booleans())
def test_curl_user_hypothesis(flag, secret, quote, netrc):
    if netrc:
        assume(" " not in secret and '"' not in secret)
        out = redact(f"machine h.example login ops password {secret}\nmachine g login x password {secret}\n")
        assert_hidden(out, secret, ["machine h.example login ops password", "machine g login x"])
        return
    if quote == '"':
        secret = secret.replace('"', "")
    out = redact(f"curl -fsS {flag}{quote}ops:{secret}{quote} https://h.example/x -o out\n")
    assert_hidden(out, secret, ["https://h.example/x -o out", "ops:"])


# --------------------------------------------------------------------------- Kubernetes Secret, docker config


K8S_SECRET = """apiVersion: v1
data:
  .dockerconfigjson: QdockerCfg1
  tls.key: QtlsKey111
  config.yaml: |
    Qblock1111
kind: Secret
metadata:
  name: vllm
  annotations:
    kubectl.kubernetes.io/last-applied-configuration: |
      {"apiVersion":"v1","data":{"username":"QanUser11","ca.crt":"QinlineCa1"},"kind":"Secret"}
stringData:
  anything: QstringData1
type: Opaque
"""


def test_kubernetes_secret_data():
    out = redact(K8S_SECRET)
    assert_hidden(out, "QdockerCfg1 QtlsKey111 Qblock1111 QanUser11 QinlineCa1 QstringData1",
                  ["  name: vllm", "type: Opaque", "  tls.key: ", "kind: Secret"])


def test_kubernetes_secret_as_json_and_configmap_untouched():
    text = ('{\n    "apiVersion": "v1",\n    "data": {\n        "ca.crt": "QjsonData11",\n'
            '        "user": "QjsonUser1"\n    },\n    "kind": "Secret",\n    "type": "Opaque"\n}\n')
    assert_hidden(redact(text), "QjsonData11 QjsonUser1", ['"type": "Opaque"', '"ca.crt": '])
    config_map = "apiVersion: v1\nkind: ConfigMap\ndata:\n  model: /m\n"
    assert redact(config_map) == config_map


@SETTINGS
@given(st.lists(st.tuples(st.from_regex(r"[a-z][a-z0-9.\-]{0,10}", fullmatch=True), _chunk),
                min_size=1, max_size=5, unique_by=lambda kv: kv[0]),
       st.sampled_from(["data", "stringData", "binaryData"]), st.sampled_from(["", "  "]))
def test_kubernetes_secret_hypothesis(items, field, indent):
    body = "".join(f"{indent}  {k}: {v}\n" for k, v in items)
    text = f"{indent}apiVersion: v1\n{indent}kind: Secret\n{indent}{field}:\n{body}{indent}type: Opaque\n"
    assert_hidden(redact(text), " ".join(v for _k, v in items), [f"{indent}type: Opaque"])


def test_docker_config_auth():
    text = ('{\n  "auths": {\n    "registry.example:5000": {\n      "auth": "QdockerAuth1",\n'
            '      "identitytoken": "QidToken111"\n    }\n  },\n  "credsStore": "pass"\n}\n')
    assert_hidden(redact(text), "QdockerAuth1 QidToken111", ['"registry.example:5000"', '"credsStore"'])
    compact = '{"auths":{"r.example":{"auth":"QdockerAuth1","email":"a@b"}}}'
    assert_hidden(redact(compact), "QdockerAuth1", ['"email":"a@b"'])


# --------------------------------------------------------------------------- Huawei Cloud AK/SK


@pytest.mark.parametrize("text, keep", [
    ("HUAWEICLOUD_SDK_AK=QakValue11\nHUAWEICLOUD_SDK_SK=QsEcret1x\nREGION=cn-north-4\n", "REGION=cn-north-4"),
    ("export OBS_SK='QsEcret1x'\nexport OBS_ENDPOINT=obs.cn\n", "export OBS_ENDPOINT=obs.cn"),
    ("ak: QakValue11\nsk: QsEcret1x\nendpoint: obs.cn\n", "endpoint: obs.cn"),
    ('{"ak": "QakValue11", "sk": "QsEcret1x", "region": "cn"}', '"region": "cn"'),
    ("hcloud configure set --cli-access-key=QakValue11 --cli-secret-key=QsEcret1x --cli-region=cn",
     "--cli-region=cn"),
    ("User Name,Access Key Id,Secret Access Key\nops,QakValue11,QsEcret1x\n", "User Name,Access Key Id"),
    ("accessKey: QakValue11\nsecretKey: QsEcret1x\nbucket: b\n", "bucket: b"),
])
def test_huawei_cloud_ak_sk(text, keep):
    assert_hidden(redact(text), "QsEcret1x QakValue11", [keep])


# --------------------------------------------------------------------------- cookies


@pytest.mark.parametrize("text, keep", [
    ("Cookie: session=QsEcret1x; csrftoken=Qtail2xxx\nHost: h\n", "Host: h"),
    ("< Set-Cookie: sid=QsEcret1x; Path=/; HttpOnly\n< Server: uvicorn\n", "< Server: uvicorn"),
    ("> Cookie: sid=QsEcret1x; b=Qtail2xxx\n> Accept: */*\n", "> Accept: */*"),
    ("curl -H 'Cookie: a=QsEcret1x; b=Qtail2xxx' -H 'Accept: x' https://h", "-H 'Accept: x' https://h"),
    ('{"headers": {"Cookie": "a=QsEcret1x; b=Qtail2xxx", "Accept": "x"}}', '"Accept": "x"'),
    ("requests.get(u, cookies={'sid': 'QsEcret1x', 'b': 'Qtail2xxx'}, timeout=3)", "timeout=3"),
    ("INFO request headers: cookie: a=QsEcret1x; b=Qtail2xxx", "INFO request headers"),
    ("curl --cookie 'a=QsEcret1x; b=Qtail2xxx' https://h", "https://h"),
])
def test_cookies(text, keep):
    assert_hidden(redact(text), "QsEcret1x Qtail2xxx", [keep])


@SETTINGS
@given(st.lists(st.tuples(st.from_regex(r"[a-z_]{1,8}", fullmatch=True), _chunk), min_size=1, max_size=4),
       st.sampled_from(["Cookie", "cookie", "Set-Cookie", "set-cookie", "COOKIE"]),
       st.sampled_from(["{h}: {v}\n", "> {h}: {v}\n", "-H '{h}: {v}' url\n", '-H "{h}: {v}" url\n',
                        '{{"{h}": "{v}", "x": "y"}}\n']))
def test_cookie_hypothesis(pairs, header, form):
    value = "; ".join(f"{k}={v}" for k, v in pairs) + ("; Path=/; HttpOnly" if "Set" in header else "")
    out = redact("start\n" + form.format(h=header, v=value) + "end\n")
    assert_hidden(out, " ".join(v for _k, v in pairs), ["start\n", "end\n"])


# --------------------------------------------------------------------------- Kubernetes env name/value


@pytest.mark.parametrize("text, keep", [
    ("env:\n  - name: VLLM_API_KEY\n    value: QsEcret1x\n  - name: PORT\n    value: '8000'\n", "value: '8000'"),
    ('[{"name": "HF_TOKEN", "value": "QsEcret1x"}, {"name": "PORT", "value": "8000"}]', '"value": "8000"'),
])
def test_name_value_pairs(text, keep):
    assert_hidden(redact(text), "QsEcret1x", [keep])


# --------------------------------------------------------------------------- JWTs anywhere


def test_jwt_anywhere():
    jwt = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJRc0VjcmV0In0." + "Qsig" + "A" * 600
    out = redact(f"got {jwt} from the server, len=5")
    assert jwt[:30] not in out and "QsigAAAA" not in out and "from the server, len=5" in out


# --------------------------------------------------------------------------- linear time


HOSTILE_UNITS = ['api_key="', "api_key=[", "token: ", '"a":', "a=", "--api-key ", "Cookie: ", "x://a@",
                 "machine h login u password ", "-----BEGIN PRIVATE KEY-----", "curl -u a:", "eyJa.eyJb.",
                 "[{", "'token'='", "- --token\n", "data:\n", "<password>", "api_key: !&", "--api-key -",
                 'api_key="""', "docker login -p ", "obsutil config -k=", "token x\n"]


@pytest.mark.parametrize("unit", HOSTILE_UNITS)
def test_one_mebibyte_line_is_a_hang_guard(unit):
    """A hang guard only: the ratios of 1, 2 and 4 MiB are benchmarks/redact_scale.py's to print.

    CPU seconds, not the wall clock, so that other jobs on a shared host do not fail it. A quadratic redactor
    takes 16 to 19 s on one 1 MiB line; the linear one about 1.3 s, so the bound leaves it six times that.
    """
    text = unit * ((1 << 20) // len(unit))
    started = time.process_time()
    redact(text)
    assert time.process_time() - started < 8


def test_benchmark_script_runs():
    out = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "redact_scale.py"), "--sizes", "16,32",
                          "--units", "a=,api_key=\""], capture_output=True, text=True, check=True, timeout=120)
    assert "ratio" in out.stdout and "api_key" in out.stdout


def test_redacted_marker():
    assert REDACTED == "<redacted>"


# --------------------------------------------------------------------------- more forms of the same classes


@pytest.mark.parametrize("key", ["APIkey", "OAuthToken", "HTTPSecret", "myAPItoken", "DBPassword"])
def test_acronyms_before_a_secret_word(key):
    assert is_secret_key(key)


@pytest.mark.parametrize("text, keep", [
    ("api_key: !vault |\n  QsEcret1x\n  Qtail2xxx\nport: 1\n", "port: 1"),
    ("token: &tok |-\n  QsEcret1x\nport: 1\n", "port: 1"),
    ("<settings><password>QsEcret1x Qtail2xxx</password><port>1</port></settings>", "<port>1</port>"),
    ("<apiKey>\n  QsEcret1x\n</apiKey>\n<model>m</model>", "<model>m</model>"),
])
def test_yaml_tags_and_xml_elements(text, keep):
    assert_hidden(redact(text), "QsEcret1x Qtail2xxx", [keep])


def test_an_option_without_a_value_keeps_the_next_option():
    out = redact("echo $P | docker login --password-stdin -u ops registry.example")
    assert "-u ops registry.example" in out


@pytest.mark.parametrize("text, keep", [
    ('api_key = """QsEcret1x "Qtail2xxx"""\nport = 1', "port = 1"),
    ("token = '''QsEcret1x\nQtail2xxx'''\nport = 1", "port = 1"),
    ("masterPassword QsEcret1x;\nport 6379\ntoken expired for user\n", "token expired for user"),
    ("masterPassword 'QsEcret1x Qtail2xxx'\nport 6379\n", "port 6379"),
    ("  X_API_KEY\tQsEcret1x\n  PORT\t8000\n", "PORT\t8000"),
    ("obsutil config -i=QakValue11 -k=QsEcret1x -t=Qtail2xxx -e=obs.cn", "-e=obs.cn"),
    ("docker login -u ops -p QsEcret1x registry.example", "registry.example"),
    ("helm registry login reg.example --username u -p 'QsEcret1x Qtail2xxx'", "--username u"),
    ("sshpass -p QsEcret1x ssh -p 22 h", "ssh -p 22 h"),
    ("mysql -uroot -pQsEcret1x -h db", "-h db"),
])
def test_triple_quotes_spaced_pairs_and_login_commands(text, keep):
    assert_hidden(redact(text), "QsEcret1x Qtail2xxx QakValue11", [keep])


def test_docker_run_ports_are_kept():
    text = "docker run -p 8000:8000 img\nssh -p 22 host\n"
    assert redact(text) == text
