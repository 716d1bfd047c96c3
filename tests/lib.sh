# Sourced by the shell tests (". "$(dirname "$0")/../lib.sh""): each check
# says ok or FAIL with what it compared, and verdict ends the test with PASS,
# or with the count of failed checks and exit status 1.
fails=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }
verdict() { # what passed
    if [ "$fails" -eq 0 ]; then
        echo "PASS: $*"
    else
        echo "FAIL: $fails failed checks"
        exit 1
    fi
}
