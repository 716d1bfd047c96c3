/* The CPU backend's convolutional update (plugin/cpu/update.c: one threaded
 * pass) against darknet's update_convolutional_layer (three single-threaded
 * loops), bit for bit: weights, histories, biases, scales and their
 * histories, over three steps of a layer large enough to be split between
 * threads, with and without batch-norm scales and with a learning-rate scale.
 */
#include "cpu.h"
#include "check.h"

#include "convolutional_layer.h"

#include <stdlib.h>
#include <string.h>

enum { N = 64, NW = 64 * 32 * 3 * 3 * 4 }; /* 73,728 weights: split between threads (above 65,536) */

typedef struct {
    float w[NW], u[NW], b[N], bu[N], s[N], su[N];
} params;

static layer view(params *p, int scales)
{
    layer l;
    memset(&l, 0, sizeof l);
    l.type = CONVOLUTIONAL;
    l.n = N;
    l.nweights = NW;
    l.learning_rate_scale = 0.75f;
    l.weights = p->w, l.weight_updates = p->u, l.biases = p->b, l.bias_updates = p->bu;
    if (scales) l.scales = p->s, l.scale_updates = p->su;
    return l;
}

static long differing(const float *a, const float *b, long n)
{
    long d = 0;
    for (long i = 0; i < n; ++i) d += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return d;
}

int main(void)
{
    static params ref, got;
    srand(11);
    for (int i = 0; i < NW; ++i) {
        ref.w[i] = ((float)rand() / RAND_MAX - .5f) * .2f;
        ref.u[i] = ((float)rand() / RAND_MAX - .5f) * 3e-3f;
    }
    for (int i = 0; i < N; ++i) {
        ref.b[i] = (float)rand() / RAND_MAX - .5f, ref.bu[i] = (float)rand() / RAND_MAX - .5f;
        ref.s[i] = 1 + (float)rand() / RAND_MAX, ref.su[i] = (float)rand() / RAND_MAX - .5f;
    }
    update_args a;
    memset(&a, 0, sizeof a);
    a.batch = 24, a.learning_rate = 1e-3f, a.momentum = .9f, a.decay = 5e-4f;
    for (int scales = 0; scales < 2; ++scales) {
        params start = ref;
        got = ref;
        layer lr = view(&ref, scales), lg = view(&got, scales);
        CHECK(amp_update_conv_replaces(&(layer){.type = CONVOLUTIONAL,
                                                .update = update_convolutional_layer}) &&
                  !amp_update_conv_replaces(&(layer){.type = CONNECTED}),
              "the convolutional update is replaced only where it is darknet's");
        for (int step = 1; step <= 3; ++step) {
            update_convolutional_layer(lr, a);
            amp_update_conv(lg, a);
            const long dw = differing(ref.w, got.w, NW), du = differing(ref.u, got.u, NW);
            const long db = differing(ref.b, got.b, N) + differing(ref.bu, got.bu, N);
            const long ds = differing(ref.s, got.s, N) + differing(ref.su, got.su, N);
            const long moved = differing(start.w, got.w, NW);
            CHECK(dw == 0 && du == 0 && db == 0 && ds == 0 && moved > NW / 2,
                  "%s scales, step %d: weights %ld, histories %ld, biases %ld, scales %ld of "
                  "%d/%d/%d/%d elements differ from darknet's update (bound 0); %ld weights "
                  "moved", scales ? "with" : "without", step, dw, du, db, ds, NW, NW, 2 * N,
                  2 * N, moved);
        }
        ref = start; /* the same start for the second round */
    }
    return check_report();
}
