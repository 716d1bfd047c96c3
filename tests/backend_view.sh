#!/bin/sh
# A backend's view of the network (plugin/backend.h, "What a backend reads
# and writes of amp_net"): the backends' sources (plugin/cpu/, cuda/) name
# only the amp_net fields listed there, through the names they hold a network
# by (an->, an_->, ...->owner->). A field outside the list fails, named with
# its file and line: the core's own state (the phase, the skip counters, the
# plan's bookkeeping) is the core's.
#   backend_view.sh SOURCE_DIR
set -u
src=$1
read_fields="net layers bk scaler env comm cfgfile tensors ntensors nparams states nstates nstate_elems weights_version owns_scaler error ops"
write_fields="batch_scale found_inf bad_tensor loss_bad loss_element prof_steps plan_off"
allowed=" $read_fields $write_fields "
files=$(ls "$src"/plugin/cpu/*.c "$src"/plugin/cpu/*.h "$src"/cuda/*.c "$src"/cuda/*.cu "$src"/cuda/*.h 2>/dev/null)
[ -n "$files" ] || { echo "FAIL: no backend sources under $src"; exit 1; }
uses=$(grep -on '\(\<an\|\<an_\|->owner\)->[a-z_][a-z_0-9]*' $files | sed "s|^$src/||")
n=$(echo "$uses" | grep -c . || true)
bad=0
for u in $uses; do
    field=${u##*->}
    case "$allowed" in
    *" $field "*) ;;
    *) echo "FAIL: ${u%%:*}:$(echo "$u" | cut -d: -f2): amp_net.$field is not in a backend's view (backend.h)"; bad=1 ;;
    esac
done
echo "$n uses of amp_net in the backends' sources, of $(echo $allowed | wc -w) fields in their view"
[ $bad = 0 ] && echo "PASS: the backends read and write only their view of amp_net"
exit $bad
