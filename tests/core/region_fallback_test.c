/* A data-movement layer's half form that overflows: a shortcut between half
 * layers whose sum of two finite float16 tensors is not finite.
 *
 *   region_fallback_test CFG fallback|nofallback [gpu]   (tests/cfg/shortcut_overflow.cfg)
 *
 * gpu: the networks on GPU 0 (with DARKNET_AMP_GPU_PLAN=half, gpu.region_fallback),
 * where a step's outcome reaches the host a step later: amp_step_skipped
 * waits for it, and the reader's overflow may cost a second step.
 *
 * CFG's layer 1 is a 1x1 linear convolution with no batch-norm and layer 2 a
 * shortcut adding layer 1's output to itself, between half layers (the
 * activation plan's region). Trains with AMP attached through the C API
 * (float16, the activation plan on); after two steps layer 1's weights are
 * set to 0 and its biases to 40000 (exact in float16), so the shortcut's sum
 * is 80000, beyond float16's 65504, from finite inputs. Checks:
 * - the plan put the shortcut in the region (its half form runs);
 * - step 3 is skipped for what it is: a forward overflow of layer 2
 *   [shortcut] (counted as a forward skip, the scale left alone, the skip's
 *   message naming the layer), not "a data or model problem";
 * - amp_fallback: layer 2 leaves the region (float32 from the next step on,
 *   "fell back: forward overflow" in the precision table) and the plan is
 *   made again around it (layer 1's output float32 now); the next half layer
 *   (3), which converts the 80000 to float16, may overflow in turn and fall
 *   back the same way; at most these two skips, then steps run again, every
 *   skip a forward overflow, the loss finite, the saved weights finite;
 * - the state file's list keeps layer 2, and a network resuming from it
 *   runs layer 2 in float32 from its first step ("fell back in an earlier
 *   run" in its table);
 * - amp=0 in the shortcut's section keeps it out of the region;
 * - nofallback (amp_fallback=0): the shortcut stays in half and steps 3 and
 *   4 are both skipped as forward overflows of layer 2.
 * Before the rule covered half forms, step 3 was called a data or model
 * problem (the shortcut is no half layer), nothing fell back, and every step
 * was skipped until amp_max_skips.
 */
#include "core.h"
#include "step.h"       /* amp_fallback_save, amp_fallback_resume, amp_net_restructure */
#include "state_file.h" /* amp_state_extra */
#ifdef GPU
#include "convolutional_layer.h" /* push_convolutional_layer */
#endif

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "check.h"
#include "nets.h" /* test_inputs, test_saved_nonfinite */

#define SC 2      /* the shortcut */
#define SOURCE 1  /* the convolution it adds to itself */
#define READER 3  /* the half convolution reading its sum */

/* A training step on new random inputs with one-hot labels. */
static void train_step(network *net)
{
    static unsigned seed = 7;
    test_inputs(net, seed++, 1);
    train_network_datum(net);
}

static network *attached(const char *cfg, int fallback)
{
    network *net = parse_network_cfg((char *)cfg);
    amp_options o;
    amp_options_init(&o, AMP_DTYPE_FLOAT16);
    o.fallback = fallback;
    o.init_scale = 256;
    char err[AMP_MSG_LEN] = "";
    if (amp_attach_options(net, &o, err, sizeof err) != AMP_OK || !amp_net_of(net)) {
        printf("FAIL: amp_attach: %s\n", err[0] ? err : "not attached");
        exit(1);
    }
    return net;
}

/* CFG with amp=1 (float16) in [net] and amp=0 in [shortcut], as out; 0 on
 * success. */
static int cfg_shortcut_off(const char *cfg, char *out, size_t size)
{
    FILE *in = fopen(cfg, "r");
    snprintf(out, size, "/tmp/region_fallback.%ld.cfg", (long)getpid());
    FILE *o = fopen(out, "w");
    char line[1024];
    int done = 0;
    while (in && o && fgets(line, sizeof line, in)) {
        fputs(line, o);
        if (!strncmp(line, "[net]", 5)) fputs("amp=1\namp_dtype=float16\n", o);
        if (!done && !strncmp(line, "[shortcut]", 10)) fputs("amp=0\n", o), done = 1;
    }
    if (in) fclose(in);
    return !o || fclose(o) != 0 || !done;
}

/* The precision table's line for layer k (amp_policy_print), into line. */
static void table_line(const amp_net *an, int k, char *line, size_t size)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    line[0] = 0;
    if (!f) return;
    amp_policy_print(an, f);
    fclose(f);
    char want[16];
    snprintf(want, sizeof want, "%d", k);
    for (char *s = buf ? strtok(buf, "\n") : NULL; s; s = strtok(NULL, "\n")) {
        const char *at = strstr(s, "layers: ");
        if (!at) continue;
        /* k alone, or in a run "a-b" or a list "a,b" */
        for (const char *p = at + strlen("layers: "); *p;) {
            char *end;
            const long a = strtol(p, &end, 10);
            long b = a;
            if (*end == '-') b = strtol(end + 1, &end, 10);
            if (a <= k && k <= b) snprintf(line, size, "%s", s);
            p = *end ? end + 1 : end;
        }
    }
    free(buf);
}

int main(int argc, char **argv)
{
    const int nofallback = argc >= 3 && !strcmp(argv[2], "nofallback");
    const int gpu = argc == 4 && !strcmp(argv[3], "gpu");
    if (argc < 3 || argc > 4 || (argc == 4 && !gpu) ||
        (!nofallback && strcmp(argv[2], "fallback") != 0)) {
        fprintf(stderr, "usage: region_fallback_test CFG fallback|nofallback [gpu]\n");
        return 2;
    }
#ifdef GPU
    gpu_index = gpu ? 0 : -1;
#else
    if (gpu) {
        printf("SKIP: a CPU build\n");
        return 77;
    }
    gpu_index = -1;
#endif
    srand(7);
    network *net = attached(argv[1], !nofallback);
    amp_net *an = amp_net_of(net);
    CHECK(an->layers[SC].region && an->layers[SOURCE].out_half && an->layers[SC].out_half,
          "the plan: layer %d [shortcut] runs its half form (region %d), layer %d's output and "
          "its own in float16 (%d, %d)",
          SC, an->layers[SC].region, SOURCE, an->layers[SOURCE].out_half, an->layers[SC].out_half);
    train_step(net);
    train_step(net);
    CHECK(!amp_step_skipped(NULL, net), "step 2 ran");

    layer *src = &net->layers[SOURCE];
    for (int i = 0; i < src->nweights; ++i) src->weights[i] = 0;
    for (int i = 0; i < src->n; ++i) src->biases[i] = 40000;
#ifdef GPU
    if (net->gpu_index >= 0) push_convolutional_layer(*src);
#endif
    an->weights_version += 1; /* a load would say so: half copies made again */
    const float scale = amp_scaler_get_scale(an->scaler);
    const unsigned long long fwd0 = an->forward_skips, loss0 = an->loss_skips;

    train_step(net); /* step 3: the shortcut's sum overflows */
    CHECK(amp_step_skipped(NULL, net) == 1, "step 3 was skipped");
    CHECK(an->forward_skips == fwd0 + 1 && an->loss_skips == loss0,
          "counted as a forward overflow (forward skips %llu, was %llu; loss skips %llu, was %llu)",
          an->forward_skips, fwd0, an->loss_skips, loss0);
    CHECK(amp_scaler_get_scale(an->scaler) == scale, "the scale stays %g (was %g)",
          amp_scaler_get_scale(an->scaler), scale);
    CHECK(strstr(an->bad, "layer 2 [shortcut] overflowed float16 in its forward pass") != NULL,
          "the skip names the shortcut's overflow: \"%s\"", an->bad);

    if (nofallback) {
        train_step(net);
        CHECK(amp_step_skipped(NULL, net) == 1 && an->forward_skips == fwd0 + 2 &&
                  an->loss_skips == loss0,
              "amp_fallback=0: step 4 skipped alike (forward skips %llu, loss skips %llu)",
              an->forward_skips - fwd0, an->loss_skips - loss0);
        CHECK(an->layers[SC].region && !an->layers[SC].fell_back,
              "amp_fallback=0: the shortcut stays in float16 (region %d)", an->layers[SC].region);
        return check_report();
    }

    /* Then steps run: at most one more skip on the CPU, the reader's input
     * overflowing in turn (a forward overflow of layer 3, which falls back
     * too); on a GPU, whose outcomes come a step late, each of the two
     * overflows may cost one step more. */
    const int most = gpu ? 3 : 1;
    int ran = 0, skips = 0;
    float loss = NAN;
    for (int step = 4; step <= 9; ++step) {
        train_step(net);
        if (amp_step_skipped(NULL, net)) {
            skips += 1;
            CHECK(strstr(an->bad, "layer 3 [convolutional] overflowed float16") != NULL ||
                      (gpu && strstr(an->bad, "layer 2 [shortcut] overflowed float16")),
                  "step %d skipped for the %s's overflow: \"%s\"", step,
                  gpu ? "shortcut's or the reader" : "reader", an->bad);
        } else {
            ran += 1;
            loss = *net->cost;
        }
    }
    CHECK(skips <= most && ran == 6 - skips && isfinite(loss),
          "after the fallback: %d of steps 4-9 skipped (at most %d), %d ran, the last loss %g",
          skips, most, ran, loss);
    CHECK(an->layers[SC].fell_back == AMP_FELL_FORWARD && !an->layers[SC].region &&
              !an->layers[SC].out_half && !an->layers[SOURCE].out_half,
          "layer 2 fell back for its forward overflow (why %d): out of the region (%d), the plan "
          "made again around it (its output and layer %d's in float32: %d, %d)",
          (int)an->layers[SC].fell_back, an->layers[SC].region, SOURCE, an->layers[SC].out_half,
          an->layers[SOURCE].out_half);
    char line[512];
    table_line(an, SC, line, sizeof line);
    CHECK(strstr(line, "float32 (fell back: forward overflow)") != NULL,
          "the precision table shows it: \"%s\"", line);
    CHECK(an->forward_skips == fwd0 + 1 + (unsigned long long)skips && an->loss_skips == loss0,
          "every skip a forward overflow (%llu forward, %llu loss)", an->forward_skips - fwd0,
          an->loss_skips - loss0);
    CHECK(!skips || an->layers[READER].precision == AMP_PRECISION_FELL_BACK,
          "a reader that overflowed fell back (precision %d)",
          (int)an->layers[READER].precision);
    long values = 0;
    const long bad = test_saved_nonfinite(net, &values);
    CHECK(bad == 0 && values > 0, "the weights saved now hold no inf or NaN (%ld of %ld values)",
          bad, values);

    /* What the state file keeps, and a resume from it. */
    amp_state_extra *x = calloc(1, sizeof *x);
    amp_fallback_save(an, x);
    int listed = 0;
    for (int i = 0; i < x->nfallback; ++i)
        listed |= x->fallback[i].layer == SC && x->fallback[i].why == AMP_FELL_FORWARD;
    CHECK(listed, "the state file's list keeps layer 2 (%d layers listed)", x->nfallback);
    network *again = attached(argv[1], 1);
    amp_net *bn = amp_net_of(again);
    char err[AMP_MSG_LEN] = "";
    const int kept = amp_fallback_resume(bn, x, "the saved list");
    const amp_status st = amp_net_restructure(bn, err, sizeof err);
    CHECK(st == AMP_OK && kept == x->nfallback && !bn->layers[SC].region &&
              bn->layers[SC].fell_back == AMP_FELL_FORWARD && bn->layers[SC].fell_back_earlier,
          "a resume runs layer 2 in float32 from its first step (%d of %d kept, region %d%s%s)",
          kept, x->nfallback, bn->layers[SC].region, err[0] ? ": " : "", err);
    table_line(bn, SC, line, sizeof line);
    CHECK(strstr(line, "fell back in an earlier run: forward overflow") != NULL,
          "its table says so: \"%s\"", line);
    train_step(again);
    CHECK(!amp_step_skipped(NULL, again) && isfinite(*again->cost),
          "the resumed network's first step ran (loss %g)", *again->cost);
    free(x);

    /* amp=0 in the shortcut's section (read from the cfg, as darknet's
     * programs attach): darknet's float32 shortcut from the start. */
    char off[256];
    network *off_net = NULL;
    if (cfg_shortcut_off(argv[1], off, sizeof off) == 0 && amp_register() == AMP_OK)
        off_net = parse_network_cfg(off);
    remove(off);
    const amp_net *kn = off_net ? amp_net_of(off_net) : NULL;
    CHECK(kn && !kn->layers[SC].region && !kn->layers[SC].out_half &&
              kn->layers[READER].precision == AMP_PRECISION_HALF,
          "amp=0 in the [shortcut] section keeps it on darknet's float32 code (region %d, its "
          "output in half %d) while the convolutions stay half",
          kn ? kn->layers[SC].region : -1, kn ? kn->layers[SC].out_half : -1);
    return check_report();
}
