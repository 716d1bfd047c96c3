/* Layers (and recurrent sub-layers) installed on oneDNN that ran in the
 * emulation instead: a failed primitive, or a shape oneDNN could not run. A
 * test comparing oneDNN with the emulation checks there are none, or it
 * would compare the emulation with itself. Needs core.h and cpu.h. */
#ifndef AMP_TEST_ONEDNN_FALLBACKS_H
#define AMP_TEST_ONEDNN_FALLBACKS_H

static inline int onednn_fallbacks(network *net)
{
    const amp_net *an = amp_net_of(net);
    int n = 0;
    for (int i = 0; i < net->n; ++i) {
        const amp_layer *al = &an->layers[i];
        n += amp_onednn_fallbacks(cpu_layer_of(al));
        for (int k = 0; k < al->nsubs; ++k) n += amp_onednn_fallbacks(cpu_layer_of(&al->subs[k]));
    }
    return n;
}

/* The convolutions on oneDNN not in the form DARKNET_AMP_CONV forces
 * (matmul: every ungrouped one as im2col + matmul; direct: none), so that a
 * test run for one form cannot silently test the other; 0 when auto or
 * unset. Prints how many run in each form. */
static inline int onednn_conv_form_mismatches(network *net)
{
    const char *form = getenv("DARKNET_AMP_CONV");
    const int want = !form ? -1 : !strcmp(form, "matmul") ? 1 : !strcmp(form, "direct") ? 0 : -1;
    const amp_net *an = amp_net_of(net);
    int counts[2] = {0, 0}, bad = 0;
    for (int i = 0; i < net->n; ++i) {
        double td, tm;
        const int mm = amp_onednn_form(cpu_layer_of(&an->layers[i]), &td, &tm);
        if (mm < 0 || net->layers[i].type != CONVOLUTIONAL) continue;
        counts[mm]++;
        bad += want >= 0 && mm != (want && net->layers[i].groups == 1);
    }
    printf("oneDNN convolutions: %d as im2col + matmul, %d as oneDNN's (DARKNET_AMP_CONV=%s)\n",
           counts[1], counts[0], form ? form : "unset");
    return bad;
}

#endif
