#!/bin/sh
# The API front's init step in the pod (role ascendai.vllm.k8s_manifests): writes the key's line of nginx's map to
# the file named by $1, from VLLM_API_KEY, which Kubernetes sets from the same Secret (secretKeyRef) as vLLM's.
# nginx's configuration (the ConfigMap, rendered from role api_front's template) includes that file: the key is
# never in a ConfigMap or in the manifests, only in the Secret and in this file on the pod's memory-backed volume,
# mode 0600, read by nginx's master (root) when it starts; its workers never read it.
#
# The line is the one role api_front writes for a key (filter ascendai.vllm.nginx_bearer_regex):
#   "~^[Bb][Ee][Aa][Rr][Ee][Rr]\x20KEY$" 1;
# with every character of the key but letters and digits written as \xHH, so the key can neither end the
# directive nor change the expression; the scheme in any case, the key exactly. A key the filter refuses (empty, a
# space, a control or non-ASCII character) fails here too, without showing it. tests/integration/roles/
# test_k8s_manifests.py runs this file and checks it against the filter for every printable ASCII character.
#
# POSIX sh and awk only: the stock nginx images, Debian (mawk) and Alpine (busybox) alike, have both (their own
# entrypoint runs awk).
set -eu
umask 077
out=$1
if ! awk 'BEGIN {
    key = ENVIRON["VLLM_API_KEY"]
    plain = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
    for (i = 33; i < 127; i++) code[sprintf("%c", i)] = i
    bad = (key == "")
    pattern = ""
    for (n = 1; n <= length(key) && !bad; n++) {
        c = substr(key, n, 1)
        if (!(c in code)) bad = 1
        else if (index(plain, c) > 0) pattern = pattern c
        else pattern = pattern sprintf("\\x%02x", code[c])
    }
    if (bad) {
        print "front-keys: the API key (VLLM_API_KEY, from the Secret) is empty or holds a space, a control character" \
              " or a non-ASCII character (the key is not shown). Use printable ASCII without spaces." > "/dev/stderr"
        exit 1
    }
    printf "        \"~^[Bb][Ee][Aa][Rr][Ee][Rr]\\x20%s$\" 1;\n", pattern
}' > "$out.new"; then
    rm -f "$out.new"
    exit 1
fi
mv "$out.new" "$out"
