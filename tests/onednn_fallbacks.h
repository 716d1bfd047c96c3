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

#endif
