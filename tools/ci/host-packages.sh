#!/usr/bin/env bash
# The Debian packages later stages use; the one stage that runs apt.
# promtool (Debian's prometheus) checks the monitoring role's alert rules in the unit tests, which run
# without apt, network or Docker and skip those checks (saying so) where promtool is missing.
# nginx (Debian's) runs the API front's configuration in front of a stand-in server in the unit tests
# (tests/unit/test_api_front_routes.py): every route of every allowed vLLM release without the key.
set -euo pipefail
missing=()
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
[[ -x /usr/sbin/nginx ]] || missing+=(nginx)
if (( ${#missing[@]} > 0 )); then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
promtool --version 2>&1 | head -1
/usr/sbin/nginx -v 2>&1
