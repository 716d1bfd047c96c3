/* Two networks sharing one scaler through the explicit API (a GAN-style loop),
 * made from an amp_config as a program outside the project would:
 * each network decides its own skip, the scale updates once per iteration
 * from the OR of their overflow flags, and misuse is an error, not a crash.
 *
 *   shared_scaler_test CFG
 *
 * Network A gets a NaN injected into layer 1's weights gradient at its step 2.
 */
#include "darknet.h"
#include "darknet_amp.h" /* the public API alone */
#include "check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void forward_backward(network *net)
{
    for (int i = 0; i < net->batch * net->inputs; ++i) net->input[i] = (float)rand() / RAND_MAX;
    memset(net->truth, 0, net->batch * net->truths * sizeof(float));
    for (int b = 0; b < net->batch; ++b) net->truth[b * net->truths + rand() % net->truths] = 1;
    *net->seen += net->batch;
    net->train = 1;
    forward_network(net);
    backward_network(net);
}

static float first_weight(const network *net)
{
    return net->layers[1].weights[0];
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: shared_scaler_test CFG\n");
        return 2;
    }
    char err[512] = "";
    amp_config *c = NULL;
    amp_scaler *s = NULL;
    gpu_index = -1;
    srand(11);
    if (amp_config_create(AMP_DTYPE_FLOAT32, &c, err, sizeof err) != AMP_OK ||
        amp_scaler_create(c, &s, err, sizeof err) != AMP_OK) {
        printf("FAIL: amp_scaler_create: %s\n", err);
        return 1;
    }
    network *a = parse_network_cfg(argv[1]), *b = parse_network_cfg(argv[1]);
    setenv("DARKNET_AMP_INJECT", "1:weights:nan:2", 1);
    amp_status ra = amp_attach(a, s, err, sizeof err);
    unsetenv("DARKNET_AMP_INJECT");
    amp_status rb = amp_attach(b, s, err, sizeof err);
    CHECK(ra == AMP_OK && rb == AMP_OK, "both networks attached to one scaler (%s)", err);
    if (ra || rb) return 1;

    amp_status st = amp_update(s, err, sizeof err);
    CHECK(st == AMP_ERR_STATE, "amp_update before any step: %s: \"%s\"", amp_status_name(st), err);
    st = amp_step(s, a, err, sizeof err);
    CHECK(st == AMP_ERR_STATE, "amp_step before any backward: %s: \"%s\"", amp_status_name(st),
          err);

    float scale0 = amp_scaler_get_scale(s);
    for (int it = 1; it <= 3; ++it) {
        float wa = first_weight(a), wb = first_weight(b), before = amp_scaler_get_scale(s);
        forward_backward(a);
        forward_backward(b);
        st = amp_unscale(s, a, err, sizeof err);
        CHECK(st == AMP_OK, "iteration %d: unscale A", it);
        st = amp_unscale(s, a, err, sizeof err);
        CHECK(st == AMP_ERR_STATE,
              "iteration %d: a second unscale of A before its step: %s: \"%s\"", it,
              amp_status_name(st), err);
        CHECK(amp_step(s, a, err, sizeof err) == AMP_OK, "iteration %d: step A", it);
        CHECK(amp_step(s, b, err, sizeof err) == AMP_OK, "iteration %d: step B (unscales itself)",
              it);
        CHECK(amp_scaler_get_scale(s) == before,
              "iteration %d: steps leave the scale to amp_update", it);
        CHECK(amp_update(s, err, sizeof err) == AMP_OK, "iteration %d: one update", it);
        int skip_a = amp_step_skipped(s, a), skip_b = amp_step_skipped(s, b);
        float after = amp_scaler_get_scale(s);
        if (it == 2) {
            CHECK(skip_a == 1 && first_weight(a) == wa, "iteration 2: A skipped, its weights kept");
            CHECK(skip_b == 0 && first_weight(b) != wb, "iteration 2: B stepped on its own "
                                                        "(weight %g -> %g)", wb, first_weight(b));
            CHECK(after == before / 2, "iteration 2: the shared scale backed off once: %g -> %g",
                  before, after);
        } else {
            CHECK(!skip_a && !skip_b && first_weight(a) != wa && first_weight(b) != wb,
                  "iteration %d: both stepped", it);
            CHECK(after == before, "iteration %d: scale unchanged (%g)", it, after);
        }
    }
    CHECK(amp_scaler_steps(s) == 3 && amp_scaler_skips(s) == 1,
          "the scaler counted 3 iterations, 1 with an overflow (%llu, %llu); scale %g -> %g",
          amp_scaler_steps(s), amp_scaler_skips(s), scale0, amp_scaler_get_scale(s));
    amp_scaler *other = NULL;
    amp_scaler_create(c, &other, err, sizeof err);
    st = amp_unscale(other, a, err, sizeof err);
    CHECK(st == AMP_ERR_INVALID, "a network stepped with another scaler: \"%s\"", err);
    amp_scaler_free(other);

    free_network(a);
    free_network(b);
    amp_scaler_free(s);
    amp_config_free(c);
    return check_report();
}
