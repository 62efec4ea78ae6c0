# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Values written into systemd unit files and environment files, quoted so that systemd reads back exactly what
was written, or refused with a message naming the variable.

Pure stdlib. The rules are systemd's (252, Debian 12; the same in every release the supported OSes ship):

* ``EnvironmentFile=`` files (systemd.exec(5), src/basic/env-file.c): a value in double quotes keeps every
  character but four, which a backslash escapes: ``"``, ``\\``, `````` ` `````` and ``$`` (SHELL_NEED_ESCAPE).
  Unquoted, a trailing backslash joins the next line (a later variable is swallowed) and a leading quote opens a
  value that runs to the next quote. So every value is written double-quoted with those four escaped.
* Unit files (systemd.syntax(7)): a line ending in a backslash continues on the next one, leading and trailing
  blanks are dropped, and ``%`` starts a specifier (``%%`` is a literal ``%``). Path settings
  (``EnvironmentFile=``, ``WorkingDirectory=``) take the rest of the line as it is, then simplify the path.
* ``ExecStart=`` (systemd.service(5), "Command lines"): words are split on blanks, may be double-quoted with C
  escapes, and ``$NAME`` / ``${NAME}`` are replaced by the environment (``$$`` is a literal ``$``).

Control characters cannot round-trip through any of these (a newline ends the setting and starts another): they
are refused. The message of a secret names the variable and the position, never the value.
"""

from __future__ import annotations

import re

__all__ = ["SystemdSyntaxError", "env_file", "env_file_line", "exec_path", "plain_env_value", "unit_path",
           "unit_text"]

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SHELL_NEED_ESCAPE = '"\\`$'
# systemd's PATH_MAX (4096 with the final NUL) and NAME_MAX (255): longer paths are refused by path_is_valid
_PATH_MAX = 4095
_NAME_MAX = 255
# characters that change meaning in an unquoted environment-file value or in a header/shell: a plain value
# (written without quotes, read back by regex) is printable ASCII without them
_PLAIN = re.compile(r"[!#-&(-\[\]-~]+")


class SystemdSyntaxError(ValueError):
    """A value that systemd would read back as something else; the message names the variable and the fix."""


def _show(value, secret):
    return "(the value is secret and not shown)" if secret else repr(value)


def _text(value, name, secret=False):
    if isinstance(value, bool):
        return "1" if value else "0"  # as service_env writes a flag
    if not isinstance(value, (str, int, float)):
        raise SystemdSyntaxError(f"{name}: give a string or a number, not {type(value).__name__}")
    text = str(value)
    bad = _CONTROL.search(text)
    if bad:
        raise SystemdSyntaxError(
            f"{name}={_show(text, secret)} holds the control character {bad.group()!r} at position {bad.start()} "
            "(a newline would end the setting and start another in the systemd file): give it on one line, "
            "without control characters")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise SystemdSyntaxError(f"{name}={_show(text, secret)} is not valid text (position {exc.start}): "
                                 "systemd files are UTF-8") from None
    return text


def env_file_line(key, value, name=None, secret=False):
    """``KEY="value"`` for an ``EnvironmentFile=``; systemd reads back exactly ``value``."""
    where = name or key
    if not isinstance(key, str) or not _ENV_NAME.fullmatch(key):
        raise SystemdSyntaxError(f"{where}: {key!r} is not an environment variable name (letters, digits and _, "
                                 "not starting with a digit)")
    text = _text(value, f"{where} ({key})" if name else key, secret)
    escaped = "".join("\\" + ch if ch in _SHELL_NEED_ESCAPE else ch for ch in text)
    return f'{key}="{escaped}"'


def env_file(mapping, name, secret=False):
    """The lines of an ``EnvironmentFile=`` for ``mapping`` (name -> value; None leaves a variable out), sorted."""
    if not isinstance(mapping, dict):
        raise SystemdSyntaxError(f"{name}: give a mapping of variable name to value, not {type(mapping).__name__}")
    return "".join(env_file_line(k, v, name, secret) + "\n"
                   for k, v in sorted(mapping.items(), key=lambda kv: str(kv[0])) if v is not None)


def plain_env_value(value, name):
    """A secret written unquoted (``KEY=value``) and read back by a plain regex: printable ASCII without blanks,
    quotes or backslashes, which systemd's unquoted form and an HTTP header both keep as they are."""
    text = _text(value, name, secret=True)
    if text == "":
        raise SystemdSyntaxError(f"{name} is empty")
    for pos, ch in enumerate(text):
        if not _PLAIN.fullmatch(ch):
            what = "a blank" if ch == " " else "a quote" if ch in "\"'" else "a backslash" if ch == "\\" else \
                "a character outside printable ASCII"
            raise SystemdSyntaxError(
                f"{name} holds {what} at position {pos} (the value is secret and not shown): systemd's environment "
                "file would read it back differently. Use printable ASCII without blanks, quotes or backslashes "
                "(letters and digits are enough: 43 of them make 256 bits)")
    return text


def unit_path(value, name):
    """An absolute path for a path setting of a unit (``EnvironmentFile=``, ``WorkingDirectory=``), with ``%``
    doubled; refused when systemd would read back another path."""
    text = _text(value, name)
    problem = None
    if not text.startswith("/"):
        problem = "is not an absolute path"
    elif text != text.rstrip():
        problem = "ends in a blank (systemd drops it)"
    elif text.endswith("\\"):
        problem = "ends in a backslash (systemd joins the next line to it)"
    elif len(text.encode("utf-8")) > _PATH_MAX:
        problem = f"is longer than {_PATH_MAX} bytes"
    elif any(len(part.encode("utf-8")) > _NAME_MAX for part in text.split("/")):
        problem = f"has a component longer than {_NAME_MAX} bytes"
    elif (text != "/" and text.endswith("/")) or "//" in text or any(p in (".", "..") for p in text.split("/")):
        problem = "is not in its simplest form (systemd rewrites '//', '.', '..' and a final '/')"
    if problem:
        raise SystemdSyntaxError(f"{name}={text!r} {problem}: give an absolute path such as /etc/ascendai/vllm, "
                                 "without control characters, '.' or '..' components, or a trailing '/', blank or "
                                 "backslash")
    return text.replace("%", "%%")


def exec_path(value, name):
    """An absolute path as one word of ``ExecStart=``: double-quoted, ``\\`` and ``"`` escaped, ``%`` and ``$``
    doubled."""
    text = unit_path(value, name).replace("%%", "%")
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$")
    return f'"{escaped}"'


def unit_text(value, name):
    """Free text for a unit setting such as ``Description=``: ``%`` doubled; refused when it holds a control
    character, starts or ends with a blank, or ends in a backslash."""
    text = _text(value, name)
    if text != text.strip() or text.endswith("\\"):
        raise SystemdSyntaxError(f"{name}={text!r} starts or ends with a blank or ends in a backslash, which systemd "
                                 "drops or joins to the next line: remove them")
    return text.replace("%", "%%")
