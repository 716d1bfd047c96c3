/* The backend contract (plugin/backend.h, contract.c) and the table of layer
 * kinds (plugin/kinds.c):
 * - every registered backend of this build passes amp_backend_check; copies
 *   of the CPU's table with another version, without a required member, or
 *   with half of a pair are refused, the member named;
 * - every row of the table of kinds has what its role needs (a GEMM kind its
 *   parameters and work, a recurrent kind its sub-layers), and the policy
 *   runs exactly the GEMM and recurrent kinds in half;
 * - supports() is pure (the same answer twice, none for float32) and at
 *   attach it decides: on CFG's network, a copy of the CPU backend that
 *   supports no convolution leaves every convolution in float32 (no half
 *   path) and the other half layers as the CPU backend has them.
 *
 *   contract_test CFG
 */
#include "backend.h"
#include "step.h"
#include "check.h"
#include "nets.h"
#include "network.h" /* get_layer_string */

extern const amp_backend_ops amp_cpu_backend;
#ifdef GPU
extern const amp_backend_ops amp_cuda_backend;
#endif

/* A copy of the CPU backend's table, changed by the test. */
static amp_backend_ops variant;

static void refused(const char *what, const char *member)
{
    char err[AMP_MSG_LEN] = "";
    const amp_status st = amp_backend_check(&variant, err, sizeof err);
    CHECK(st == AMP_ERR_INVALID && strstr(err, member),
          "a table %s is refused naming %s: \"%s\"", what, member, err);
    variant = amp_cpu_backend;
}

static void contract(void)
{
    const amp_backend_ops *const registered[] = {
        &amp_cpu_backend,
#ifdef GPU
        &amp_cuda_backend,
#endif
    };
    for (size_t i = 0; i < sizeof registered / sizeof registered[0]; ++i) {
        char err[AMP_MSG_LEN] = "";
        CHECK(amp_backend_check(registered[i], err, sizeof err) == AMP_OK,
              "the %s backend keeps the contract of version %d%s%s", registered[i]->name,
              AMP_BACKEND_VERSION, err[0] ? ": " : "", err);
    }
    variant = amp_cpu_backend;
    variant.version = AMP_BACKEND_VERSION - 1;
    refused("of the previous version", "version");
    variant.supports = NULL;
    refused("without supports", "supports");
    variant.unscale = NULL;
    refused("without unscale", "unscale");
    variant.restore = NULL;
    refused("deciding on the host without restore", "restore");
    variant.step_end = variant.rescale; /* any function of its type */
    refused("with step_end but no decide", "decide");
    variant.activations = NULL;
    refused("with activations_release but no activations", "activations");
}

static const char *role_name(amp_kind_role r)
{
    return r == AMP_ROLE_GEMM ? "GEMM" : r == AMP_ROLE_RECURRENT ? "recurrent"
                                       : r == AMP_ROLE_NORMALISES ? "normalises" : "moves";
}

static void kinds(void)
{
    int gemm = 0, recurrent = 0;
    for (int i = 0; i < amp_kind_count(); ++i) {
        const amp_layer_kind *k = amp_kind_at(i);
        layer l;
        memset(&l, 0, sizeof l);
        l.type = k->type;
        const amp_precision p = amp_policy(&l, AMP_DTYPE_FLOAT16, 1);
        const int half = k->role == AMP_ROLE_GEMM || k->role == AMP_ROLE_RECURRENT;
        CHECK(amp_kind_of(k->type) == k, "[%s]: its row is found by its type",
              k->name);
        CHECK((p == AMP_PRECISION_HALF) == half, "[%s] (%s): the policy runs it in %s",
              k->name, role_name(k->role), half ? "half" : "float32");
        if (k->role == AMP_ROLE_GEMM)
            CHECK(k->params && k->macs, "[%s]: a GEMM kind with its parameters and its work",
                  k->name);
        if (k->role == AMP_ROLE_RECURRENT)
            CHECK(k->subs && !k->params, "[%s]: a recurrent kind with sub-layers and no "
                  "parameters of its own", k->name);
        gemm += k->role == AMP_ROLE_GEMM;
        recurrent += k->role == AMP_ROLE_RECURRENT;
        for (int d = 0; d < 3; ++d) {
            const amp_dtype dt = (amp_dtype)d;
            const int a = amp_cpu_backend.supports(k, dt), b = amp_cpu_backend.supports(k, dt);
            CHECK(a == b && (dt != AMP_DTYPE_FLOAT32 || !a),
                  "CPU supports([%s], %s) = %d, the same twice, 0 for float32",
                  k->name, amp_dtype_name(dt), a);
        }
    }
    CHECK(gemm == 4 && recurrent == 4, "the table: %d GEMM kinds, %d recurrent (4 and 4)", gemm,
          recurrent);
    layer yolo;
    memset(&yolo, 0, sizeof yolo);
    yolo.type = YOLO;
    CHECK(!amp_kind_of(YOLO) && amp_policy(&yolo, AMP_DTYPE_FLOAT16, 1) == AMP_PRECISION_FP32,
          "a type without a row (yolo) runs in float32");
}

static const char *precision_name(amp_precision p)
{
    return p == AMP_PRECISION_HALF ? "half" : p == AMP_PRECISION_FALLBACK ? "float32 (no half path)"
                                                                          : "float32";
}

static int no_conv(const amp_layer_kind *k, amp_dtype dtype)
{
    return k && k->type != CONVOLUTIONAL && amp_cpu_backend.supports(k, dtype);
}

/* CFG's network on ops in float16: each layer's precision. */
static void precisions(const char *cfg, const amp_backend_ops *ops, amp_precision *out, int *n)
{
    network *net = test_net(cfg, 0);
    amp_options o;
    amp_options_init(&o, AMP_DTYPE_FLOAT16);
    amp_scaler *s = NULL;
    char err[AMP_MSG_LEN] = "";
    amp_net *an = amp_net_new(net);
    if (!an || amp_scaler_create_options(&o, &s, err, sizeof err) != AMP_OK) {
        printf("FAIL: setup: %s\n", err);
        exit(1);
    }
    an->enabled = an->owns_scaler = 1;
    snprintf(an->cfgfile, sizeof an->cfgfile, "%s", cfg);
    if (amp_net_attach(an, s, ops, err, sizeof err) != AMP_OK) {
        printf("FAIL: attach on %s: %s\n", ops->name, err);
        exit(1);
    }
    *n = net->n;
    for (int i = 0; i < net->n; ++i) out[i] = an->layers[i].precision;
    amp_net_free(an);
    free_network(net);
}

static void gate(const char *cfg)
{
    amp_precision cpu[64], gated[64];
    int n = 0, m = 0, convs = 0;
    precisions(cfg, &amp_cpu_backend, cpu, &n);
    variant = amp_cpu_backend;
    variant.supports = no_conv;
    precisions(cfg, &variant, gated, &m);
    network *net = test_net(cfg, 0);
    for (int i = 0; i < n && n == m; ++i) {
        const int conv = net->layers[i].type == CONVOLUTIONAL;
        convs += conv;
        CHECK(conv ? cpu[i] == AMP_PRECISION_HALF && gated[i] == AMP_PRECISION_FALLBACK
                   : gated[i] == cpu[i],
              "layer %d [%s]: %s on the CPU, %s where no convolution is supported", i,
              get_layer_string(net->layers[i].type), precision_name(cpu[i]),
              precision_name(gated[i]));
    }
    CHECK(n == m && convs > 0, "%s: %d layers, %d convolutions, gated at attach", cfg, n, convs);
    free_network(net);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        printf("usage: contract_test CFG\n");
        return 2;
    }
    contract();
    kinds();
    gate(argv[1]);
    return check_report();
}
