/* Test aid: DARKNET_AMP_INJECT (docs/api.md) puts a chosen value (inf, NaN,
 * a number) into one element of a chosen gradient just before a chosen
 * step's check, through the backend that holds the gradient; or into a cost
 * layer's delta (before the loss scale) or its loss, after its forward. */
#include "backend.h"
#include "network.h" /* get_layer_string */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int parse_value(const char *v, float *out)
{
    char *end;
    *out = strtof(v, &end); /* takes nan, inf, -inf too */
    return *v && !*end ? 0 : -1;
}

/* "LAYER:TENSOR:VALUE:STEP[,STEP...]" items separated by ';', e.g.
 * "3:weights:nan:2,5;7:uz.biases:-inf:4;16:delta:nan:3". STEP counts this
 * network's steps from 1. The value replaces the middle element of that
 * gradient or delta, or the loss. */
amp_status amp_parse_injection(amp_net *an, const char *spec, char *err, size_t errlen)
{
    char buf[AMP_MSG_LEN];
    snprintf(buf, sizeof buf, "%s", spec);
    char *save = NULL;
    for (char *item = strtok_r(buf, ";", &save); item; item = strtok_r(NULL, ";", &save)) {
        amp_injection *in = &an->inject[an->ninject];
        char *f[4], *s2 = NULL;
        int nf = 0;
        for (char *p = strtok_r(item, ":", &s2); p && nf < 4; p = strtok_r(NULL, ":", &s2))
            f[nf++] = p;
        char *end;
        long li = nf == 4 ? strtol(f[0], &end, 10) : -1;
        AMP_RETURN_ERROR_IF(an->ninject == 8 || nf != 4 || *end || li < 0 || li >= an->net->n ||
                                parse_value(f[2], &in->value) ||
                                strlen(f[1]) >= sizeof in->tensor,
                            AMP_ERR_INVALID, err, errlen,
                            "DARKNET_AMP_INJECT=%s: expected LAYER:TENSOR:VALUE:STEPS with LAYER "
                            "in [0, %d), e.g. 3:weights:nan:2,5", spec, an->net->n);
        in->layer = (int)li;
        strcpy(in->tensor, f[1]);
        /* A cost layer's delta (before the loss scale) or its loss. */
        int known = (!strcmp(in->tensor, "delta") || !strcmp(in->tensor, "loss")) &&
                    an->net->layers[li].cost;
        for (int t = 0; t < an->ntensors; ++t)
            known |= an->tensors[t].layer == in->layer && !strcmp(an->tensors[t].name, in->tensor);
        AMP_RETURN_ERROR_IF(!known, AMP_ERR_INVALID, err, errlen,
                            "DARKNET_AMP_INJECT=%s: layer %ld [%s] has no gradient '%s' (weights, "
                            "biases, scales; sub-layers as uz.weights; delta or loss of a cost "
                            "layer)",
                            spec, li, get_layer_string(an->net->layers[li].type), f[1]);
        in->nsteps = 0;
        char *s3 = NULL;
        for (char *p = strtok_r(f[3], ",", &s3); p; p = strtok_r(NULL, ",", &s3)) {
            unsigned long step = strtoul(p, &end, 10);
            AMP_RETURN_ERROR_IF(*end || !step || in->nsteps == 16, AMP_ERR_INVALID, err, errlen,
                                "DARKNET_AMP_INJECT=%s: bad step list '%s'", spec, f[3]);
            in->steps[in->nsteps++] = step;
        }
        an->ninject++;
    }
    return AMP_OK;
}

/* Whether injection j fires at this step. */
static int fires(const amp_injection *in, unsigned long step)
{
    for (int k = 0; k < in->nsteps; ++k)
        if (in->steps[k] == step) return 1;
    return 0;
}

void amp_inject_delta(amp_net *an, int index, layer *l)
{
    for (int j = 0; j < an->ninject; ++j) {
        const amp_injection *in = &an->inject[j];
        if (in->layer != index || !fires(in, an->step_index + 1)) continue;
        if (!strcmp(in->tensor, "loss") && l->cost) *l->cost = in->value;
        if (!strcmp(in->tensor, "delta") && an->ops->poke_delta)
            an->ops->poke_delta(an, l, (size_t)l->outputs * l->batch / 2, in->value);
    }
}

void amp_inject(amp_net *an)
{
    unsigned long step = an->step_index + 1;
    for (int j = 0; j < an->ninject; ++j) {
        const amp_injection *in = &an->inject[j];
        if (!fires(in, step)) continue;
        for (int t = 0; t < an->ntensors; ++t)
            if (an->tensors[t].layer == in->layer && !strcmp(an->tensors[t].name, in->tensor))
                an->ops->poke(an, t, an->tensors[t].n / 2, in->value);
    }
}
