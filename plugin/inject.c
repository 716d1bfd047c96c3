/* Test aid: DARKNET_AMP_INJECT (docs/api.md) puts a chosen value (inf, NaN,
 * a number) into one element of a chosen gradient just before a chosen
 * step's check, through the backend that holds the gradient; or into a cost
 * layer's delta (before the loss scale) or its loss, after its forward. */
#include "backend.h"
#include "network.h" /* get_layer_string */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define INJECT_MAX ((int)(sizeof((amp_net *)0)->inject / sizeof((amp_net *)0)->inject[0]))
#define STEPS_MAX ((int)(sizeof((amp_injection *)0)->steps / sizeof(unsigned long)))
#define SHOWN 48 /* characters of an item or field quoted in a message */

/* Digits only, no overflow: strtoul alone would take a sign (wrapping "-1"
 * to ULONG_MAX, a step that never comes), leading spaces, and saturate. */
static int parse_count(const char *s, unsigned long *out)
{
    const char *p = s;
    char *end;
    if (!*p) return 0;
    for (; *p; ++p)
        if (*p < '0' || *p > '9') return 0;
    errno = 0;
    *out = strtoul(s, &end, 10);
    return errno == 0 && !*end;
}

/* Splits s in place at each sep, empty pieces kept, into at most max
 * pieces: their count, or max + 1 when there are more. */
static int split(char *s, char sep, char **piece, int max)
{
    int n = 0;
    for (;;) {
        char *next = strchr(s, sep);
        if (n == max) return max + 1;
        piece[n++] = s;
        if (!next) return n;
        *next = '\0';
        s = next + 1;
    }
}

/* Item k (from 1), "LAYER:TENSOR:VALUE:STEPS", into *in. Each message quotes
 * the item and the field, escaped and cut (amp_show): the spec comes from
 * the environment and may be anything, of any length. */
static amp_status parse_item(const amp_net *an, int k, char *item, amp_injection *in, char *err,
                             size_t errlen)
{
    char shown[4 * SHOWN], field[4 * SHOWN], *f[4], *step[STEPS_MAX], *end;
    unsigned long li;
    amp_show(shown, sizeof shown, item, SHOWN);
    int nf = split(item, ':', f, 4);
    for (int i = 0; i < nf && i < 4; ++i)
        if (!*f[i]) nf = -1;
    AMP_RETURN_ERROR_IF(nf != 4, AMP_ERR_INVALID, err, errlen,
                        "DARKNET_AMP_INJECT item %d '%s': expected four non-empty fields "
                        "LAYER:TENSOR:VALUE:STEPS, e.g. 3:weights:nan:2,5",
                        k, shown);
    AMP_RETURN_ERROR_IF(!parse_count(f[0], &li) || li >= (unsigned long)an->net->n,
                        AMP_ERR_INVALID, err, errlen,
                        "DARKNET_AMP_INJECT item %d '%s': LAYER %s: expected a layer index in "
                        "[0, %d)",
                        k, shown, amp_show(field, sizeof field, f[0], SHOWN), an->net->n);
    memset(in, 0, sizeof *in);
    in->layer = (int)li;
    int known = 0;
    if (strlen(f[1]) < sizeof in->tensor) {
        strcpy(in->tensor, f[1]);
        /* A cost layer's delta (before the loss scale) or its loss. */
        known = (!strcmp(in->tensor, "delta") || !strcmp(in->tensor, "loss")) &&
                an->net->layers[li].cost;
        for (int t = 0; t < an->ntensors; ++t)
            known |= an->tensors[t].layer == in->layer && !strcmp(an->tensors[t].name, in->tensor);
    }
    AMP_RETURN_ERROR_IF(!known, AMP_ERR_INVALID, err, errlen,
                        "DARKNET_AMP_INJECT item %d '%s': layer %lu [%s] has no gradient '%s' "
                        "(weights, biases, scales; sub-layers as uz.weights; delta or loss of a "
                        "cost layer)",
                        k, shown, li, get_layer_string(an->net->layers[li].type),
                        amp_show(field, sizeof field, f[1], SHOWN));
    in->value = strtof(f[2], &end); /* takes nan, inf, -inf too */
    AMP_RETURN_ERROR_IF(*end, AMP_ERR_INVALID, err, errlen,
                        "DARKNET_AMP_INJECT item %d '%s': VALUE %s: expected a number, nan, inf "
                        "or -inf",
                        k, shown, amp_show(field, sizeof field, f[2], SHOWN));
    int ns = split(f[3], ',', step, STEPS_MAX);
    AMP_RETURN_ERROR_IF(ns > STEPS_MAX, AMP_ERR_INVALID, err, errlen,
                        "DARKNET_AMP_INJECT item %d '%s': more than %d steps", k, shown,
                        STEPS_MAX);
    for (int i = 0; i < ns; ++i)
        AMP_RETURN_ERROR_IF(!parse_count(step[i], &in->steps[i]) || !in->steps[i],
                            AMP_ERR_INVALID, err, errlen,
                            "DARKNET_AMP_INJECT item %d '%s': step '%s': expected a step number "
                            ">= 1 (STEPS: numbers separated by ',')",
                            k, shown, amp_show(field, sizeof field, step[i], SHOWN));
    in->nsteps = ns;
    return AMP_OK;
}

/* "LAYER:TENSOR:VALUE:STEP[,STEP...]" items separated by ';' (empty items
 * skipped), e.g. "3:weights:nan:2,5;7:uz.biases:-inf:4;16:delta:nan:3".
 * STEP counts this network's steps from 1. The value replaces the middle
 * element of that gradient or delta, or the loss. All or nothing: after an
 * error no item of the spec is recorded. */
amp_status amp_parse_injection(amp_net *an, const char *spec, char *err, size_t errlen)
{
    AMP_RETURN_ERROR_IF(!an || !spec, AMP_ERR_INVALID, err, errlen,
                        "DARKNET_AMP_INJECT: amp_parse_injection: an and spec must not be NULL");
    /* The whole spec, whatever its length: a fixed buffer cut long ones,
     * dropping items or steps without a word. */
    char *copy = strdup(spec), *item = copy;
    AMP_RETURN_ERROR_IF(!copy, AMP_ERR_NOMEM, err, errlen, "DARKNET_AMP_INJECT: out of memory");
    amp_injection found[INJECT_MAX];
    int n = 0, k = 0;
    amp_status st = AMP_OK;
    while (item && st == AMP_OK) {
        char *next = strchr(item, ';');
        if (next) *next++ = '\0';
        if (*item) {
            ++k;
            if (an->ninject + n >= INJECT_MAX) {
                amp_errorf(err, errlen, "DARKNET_AMP_INJECT item %d: more than %d injections", k,
                           INJECT_MAX);
                st = AMP_ERR_INVALID;
            } else {
                st = parse_item(an, k, item, &found[n++], err, errlen);
            }
        }
        item = next;
    }
    free(copy);
    if (st != AMP_OK) return st;
    memcpy(&an->inject[an->ninject], found, (size_t)n * sizeof found[0]);
    an->ninject += n;
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
