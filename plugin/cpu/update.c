/* darknet's SGD update of a convolutional layer, in one pass over the
 * weights instead of three, split between threads.
 *
 * update_convolutional_layer runs three single-threaded loops over the
 * weights: weight decay into the gradient (axpy), the step (axpy), momentum
 * (scal). For each element they compute, in this order,
 *     u = u + (-decay * batch) * w;  w = w + (lr / batch) * u;  u = momentum * u
 * and that is what this loop computes, with the same float constants and the
 * same roundings (no contraction into fused multiply-adds: the library is
 * compiled as ISO C, where GCC does not contract), so the weights and
 * histories are bit for bit darknet's (unit.update checks it). On a
 * yolov3-tiny step the three loops moved about 35 MB three times on one core.
 */
#include "cpu.h"

#include "convolutional_layer.h"

static void sgd(float *w, float *u, long n, float decay_k, float step_k, float momentum)
{
#pragma omp parallel for simd schedule(static) if (n > 65536)
    for (long i = 0; i < n; ++i) {
        const float g = u[i] + decay_k * w[i];
        w[i] = w[i] + step_k * g;
        u[i] = g * momentum;
    }
}

/* bias and scale: darknet's axpy and scal, without decay */
static void step_only(float *p, float *u, int n, float step_k, float momentum)
{
    for (int i = 0; i < n; ++i) p[i] += step_k * u[i];
    for (int i = 0; i < n; ++i) u[i] *= momentum;
}

void amp_update_conv(layer l, update_args a)
{
    const float learning_rate = a.learning_rate * l.learning_rate_scale;
    const float momentum = a.momentum, decay = a.decay;
    const int batch = a.batch;
    step_only(l.biases, l.bias_updates, l.n, learning_rate / batch, momentum);
    if (l.scales) step_only(l.scales, l.scale_updates, l.n, learning_rate / batch, momentum);
    sgd(l.weights, l.weight_updates, l.nweights, -decay * batch, learning_rate / batch, momentum);
}

int amp_update_conv_replaces(const layer *l)
{
    return l->type == CONVOLUTIONAL && l->update == update_convolutional_layer;
}
