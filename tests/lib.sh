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
# OUT/s.data: the dataset's data file with its backup folder BACKUP.
shapes_data() { # DATA_DIR BACKUP OUT
    sed "s|^backup *=.*|backup = $2|" "$1/shapes.data" > "$3/s.data"
}
# Runs a setup command, its output in OUT/LOG; on failure shows it and ends the test.
must() { # OUT LOG command...
    o=$1/$2
    shift 2
    "$@" > "$o" 2>&1 || { cat "$o"; echo "FAIL: setup: $*"; exit 1; }
}
