/* `darknet amp show FILE`: a state file (<weights>.amp) in words, and whether
 * it belongs to the weights file beside it. FILE is the state file or its
 * weights file. A corrupt file is reported as the reader refuses it (what is
 * wrong, naming the file), never half-printed. */
#include "state_file.h"

#include "error.h"

#include <stdio.h>
#include <string.h>

static const char *why_name(int why)
{
    return why == 1 ? "its forward pass overflowed"
           : why == 2 ? "its gradients overflowed at the minimum loss scale"
           : why == 3 ? "amp_probe found it beyond the half type's bound"
                      : "?";
}

amp_status amp_state_file_show(const char *path, FILE *out, char *err, size_t errlen)
{
    char weights[4096];
    const size_t n = strlen(path);
    AMP_RETURN_ERROR_IF(n + 1 > sizeof weights, AMP_ERR_INVALID, err, errlen,
                        "amp show: path too long: %s", path);
    memcpy(weights, path, n + 1);
    if (n > 4 && !strcmp(weights + n - 4, ".amp")) weights[n - 4] = 0; /* the state file given */
    char sidecar[4096 + 4];
    AMP_RETURN_ERROR_IF(amp_state_file_path(weights, sidecar, sizeof sidecar) != 0,
                        AMP_ERR_INVALID, err, errlen, "amp show: path too long: %s", path);
    amp_dtype dtype;
    amp_scale_state s;
    amp_weights_id id, now;
    static amp_state_extra x; /* large: the fallback list */
    int found = 0;
    AMP_FORWARD_IF_ERROR(
        amp_state_file_read(weights, &dtype, &s, &id, &x, &found, err, errlen));
    AMP_RETURN_ERROR_IF(!found, AMP_ERR_IO, err, errlen, "amp show: %s: no such state file",
                        sidecar);
    char desc[256];
    amp_weights_describe(&id, desc, sizeof desc);
    fprintf(out, "%s\n", sidecar);
    fprintf(out, "  half type            %s\n", amp_dtype_name(dtype));
    fprintf(out, "  loss scale           %g\n", s.scale);
    fprintf(out, "  good steps in a row  %ld (towards the next growth)\n", s.growth_tracker);
    fprintf(out, "  hysteresis left      %d overflow(s) before the next backoff\n",
            s.hysteresis_left);
    fprintf(out, "  skipped in a row     %ld\n", s.consecutive_skips);
    unsigned long long steps, skips;
    amp_steps_counted(&s, x.forward_skips, x.loss_skips, &steps, &skips);
    fprintf(out, "  steps                %llu\n", steps);
    fprintf(out, "  skipped              %llu: %llu for a gradient overflow, %llu for a half "
                 "layer's forward overflow, %llu for a non-finite loss\n",
            skips, s.skips, x.forward_skips, x.loss_skips);
    if (!x.nfallback) {
        fprintf(out, "  layers in float32    none fell back\n");
    } else {
        fprintf(out, "  layers in float32    %d fell back:\n", x.nfallback);
        for (int i = 0; i < x.nfallback; ++i)
            fprintf(out, "    layer %d: %s\n", x.fallback[i].layer, why_name(x.fallback[i].why));
    }
    fprintf(out, "  saved with weights   %s\n", id.bound ? desc : "none recorded (version 1 file)");
    amp_weights_values v;
    amp_status st = amp_weights_read(weights, &now, &v, err, errlen);
    if (st != AMP_OK) {
        fprintf(out, "  weights file         %s: %s\n", weights, err);
        err[0] = 0;
        return AMP_OK;
    }
    if (!now.bound) {
        fprintf(out, "  weights file         %s: missing\n", weights);
    } else if (!id.bound) {
        fprintf(out, "  weights file         %s: present; this state names no weights to check\n",
                weights);
    } else {
        amp_weights_describe(&now, desc, sizeof desc);
        fprintf(out, "  weights file         %s (%s): %s\n", weights, desc,
                amp_weights_same(&id, &now)
                    ? "matches: loading these weights resumes this state"
                    : "does NOT match: loading these weights starts a fresh scaler");
    }
    if (now.bound && !v.nonfinite)
        fprintf(out, "  weights values       all %llu finite\n", v.values);
    else if (now.bound)
        fprintf(out, "  weights values       %llu of %llu NOT finite (the first is value %llu "
                     "after the header): these weights cannot predict\n",
                v.nonfinite, v.values, v.first_nonfinite);
    return AMP_OK;
}
