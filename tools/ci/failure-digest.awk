# The failure of one `molecule test` log in a few lines, for the end of the CI output (which keeps only its tail):
# the last failed task that was not ignored, its TASK line and up to 30 lines of its message, each cut at 240
# characters, then molecule's own CRITICAL/ERROR lines.
#   awk -f tools/ci/failure-digest.awk LOG
/^TASK \[|^RUNNING HANDLER \[/ { task = $0; if (cap) { keep() }; next }
/^(fatal|failed): \[/ { if (cap) { keep() }; cap = 1; n = 0; buf = task "\n"; }
cap && /\.\.\.ignoring$/ { cap = 0; buf = ""; next }
cap && /^PLAY RECAP/ { keep() }
cap { if (n < 30) { buf = buf substr($0, 1, 240) "\n" } n++ }
/^(CRITICAL|ERROR) / { crit = crit substr($0, 1, 240) "\n" }
function keep() { if (buf != "") { last = buf } ; cap = 0; buf = "" }
END { if (cap) { keep() }; printf "%s%s", last, crit }
