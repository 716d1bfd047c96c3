#!/bin/sh
# libdarknet_amp.so exports the public API of darknet_amp.h and nothing else
# (-fvisibility=hidden; AMP_API on the public declarations): the dynamic
# symbols it defines against the functions the header declares.
#   exports.sh LIBRARY HEADER
set -u
lib=$1 header=$2
exported=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TDBR]$/ { print $3 }' | sort -u)
declared=$(sed -n 's/^AMP_API [^(]*[ *]\(amp_[a-z_0-9]*\)(.*/\1/p' "$header" | sort -u)
ne=$(echo "$exported" | grep -c .) nd=$(echo "$declared" | grep -c .)
echo "exported: $ne symbols; declared with AMP_API in $(basename "$header"): $nd"
extra=$(comm -23 "$(printf '%s\n' "$exported" > /tmp/exports.$$.e; echo /tmp/exports.$$.e)" \
                 "$(printf '%s\n' "$declared" > /tmp/exports.$$.d; echo /tmp/exports.$$.d)")
missing=$(comm -13 /tmp/exports.$$.e /tmp/exports.$$.d)
rm -f /tmp/exports.$$.e /tmp/exports.$$.d
fail=0
[ -z "$extra" ] || { echo "FAIL: exported but not public API:"; echo "$extra" | sed 's/^/  /'; fail=1; }
[ -z "$missing" ] || { echo "FAIL: public API not exported:"; echo "$missing" | sed 's/^/  /'; fail=1; }
[ "$nd" -gt 10 ] || { echo "FAIL: found only $nd declarations in the header"; fail=1; }
[ $fail = 0 ] && echo "PASS: exactly the public API is exported"
exit $fail
