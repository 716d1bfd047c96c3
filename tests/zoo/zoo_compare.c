/* Judges one cfg of the zoo: the AMP runs of zoo_driver against the FP32 one.
 *
 *   zoo_compare NAME REF RUN... [-- K_FLOAT16 K_BFLOAT16]
 *
 * REF and each RUN are zoo_driver OUT prefixes (REF.txt, REF.bin). For each
 * RUN (its mode, float16 or bfloat16, is read from RUN.txt):
 *  - the same network: its initial weights hash to REF's;
 *  - forward parity: every output element within
 *        |run - ref| <= K(dtype) * eps(dtype) * (|ref| + rms(ref)),
 *    eps = 2^-10 (float16), 2^-7 (bfloat16): the relative form of
 *    tol + |ref| * eps with tol = K * eps * rms(ref), so that an element near
 *    zero (a sum that cancelled) is judged on the tensor's own scale;
 *    the error is printed in units of eps, "worst = max |run - ref| /
 *    (eps * (|ref| + rms))", which must not exceed K;
 *  - the outputs are not bit-for-bit FP32's where the network has half
 *    layers (else the half path did not run, and the test could not fail);
 *  - both training losses finite where REF's are.
 * Prints one line per check and a final "RESULT" line; exit 0 when all pass.
 * ZOO_TOL_SCALE=x multiplies every K (the self-check: 0.01 must fail).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char mode[64];
    char init_hash[64], output_hash[64];
    char fallback[1024];
    char truth[64];
    size_t outputs;
    float loss[2];
    int half_layers, onednn_layers, skips;
    double scale;
    float *out;
} run;

/* Reads PREFIX.txt and PREFIX.bin. */
static int load(const char *prefix, run *r)
{
    char path[4096], key[64], value[1024];
    memset(r, 0, sizeof *r);
    r->half_layers = -1;
    r->loss[0] = r->loss[1] = NAN;
    snprintf(r->fallback, sizeof r->fallback, "-");
    snprintf(path, sizeof path, "%s.txt", prefix);
    FILE *f = fopen(path, "r");
    if (!f) {
        printf("FAIL: cannot read %s\n", path);
        return -1;
    }
    while (fscanf(f, "%63s %1023[^\n]", key, value) == 2) {
        if (!strcmp(key, "mode")) snprintf(r->mode, sizeof r->mode, "%.63s", value);
        else if (!strcmp(key, "init_hash")) snprintf(r->init_hash, sizeof r->init_hash, "%.63s", value);
        else if (!strcmp(key, "output_hash")) snprintf(r->output_hash, sizeof r->output_hash, "%.63s", value);
        else if (!strcmp(key, "truth")) snprintf(r->truth, sizeof r->truth, "%.63s", value);
        else if (!strcmp(key, "fallback")) snprintf(r->fallback, sizeof r->fallback, "%s", value);
        else if (!strcmp(key, "outputs")) r->outputs = strtoul(value, NULL, 10);
        else if (!strcmp(key, "loss1")) r->loss[0] = strtof(value, NULL);
        else if (!strcmp(key, "loss2")) r->loss[1] = strtof(value, NULL);
        else if (!strcmp(key, "half_layers")) r->half_layers = atoi(value);
        else if (!strcmp(key, "onednn_layers")) r->onednn_layers = atoi(value);
        else if (!strcmp(key, "skips")) r->skips = atoi(value);
        else if (!strcmp(key, "scale")) r->scale = atof(value);
    }
    fclose(f);
    snprintf(path, sizeof path, "%s.bin", prefix);
    f = fopen(path, "rb");
    r->out = r->outputs ? malloc(r->outputs * sizeof(float)) : NULL;
    if (!f || !r->out || fread(r->out, sizeof(float), r->outputs, f) != r->outputs) {
        printf("FAIL: cannot read %zu outputs from %s\n", r->outputs, path);
        if (f) fclose(f);
        return -1;
    }
    fclose(f);
    return 0;
}

static int failures;

static void check(int ok, const char *name, const char *mode, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void check(int ok, const char *name, const char *mode, const char *fmt, ...)
{
    va_list ap;
    printf("%s: %s %s: ", ok ? "ok" : "FAIL", name, mode);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    failures += !ok;
}

int main(int argc, char **argv)
{
    /* K: the largest error seen across the zoo, in units of eps, times a
     * margin; the measurements and the margin are in tests/zoo/CMakeLists.txt. */
    double k16 = 0, kbf = 0;
    int nruns = argc - 3;
    for (int i = 3; i < argc; ++i)
        if (!strcmp(argv[i], "--") && i + 2 < argc) {
            k16 = atof(argv[i + 1]), kbf = atof(argv[i + 2]);
            nruns = i - 3;
        }
    if (argc < 4 || nruns < 1 || k16 <= 0 || kbf <= 0) {
        fprintf(stderr, "usage: zoo_compare NAME REF RUN... -- K_FLOAT16 K_BFLOAT16\n");
        return 2;
    }
    const char *name = argv[1];
    const char *scale_env = getenv("ZOO_TOL_SCALE");
    double tol_scale = scale_env ? atof(scale_env) : 1;
    run ref;
    if (load(argv[2], &ref)) return 1;
    double rms = 0;
    for (size_t i = 0; i < ref.outputs; ++i) rms += (double)ref.out[i] * ref.out[i];
    rms = ref.outputs ? sqrt(rms / ref.outputs) : 0;
    int ref_finite = isfinite(rms);
    int ref_loss_finite = isfinite(ref.loss[0]) && isfinite(ref.loss[1]);
    printf("%s fp32: %zu outputs, rms %.6g, losses %.9g %.9g\n", name, ref.outputs, rms,
           ref.loss[0], ref.loss[1]);

    char summary[2048] = "";
    size_t len = 0;
    char fallback[1024] = "-";
    for (int k = 0; k < nruns; ++k) {
        run r;
        if (load(argv[3 + k], &r)) {
            ++failures;
            continue;
        }
        const char *m = r.mode;
        double eps = !strcmp(m, "float16") ? ldexp(1, -10) : ldexp(1, -7);
        double K = (!strcmp(m, "float16") ? k16 : kbf) * tol_scale;
        check(!strcmp(r.init_hash, ref.init_hash), name, m,
              "same initial weights as FP32 (hash %s, FP32 %s)", r.init_hash, ref.init_hash);
        if (r.outputs != ref.outputs) {
            check(0, name, m, "%zu outputs, FP32 has %zu", r.outputs, ref.outputs);
            continue;
        }
        double worst = 0, max_abs = 0;
        size_t at = 0, bad = 0, nonfinite = 0;
        for (size_t i = 0; ref_finite && i < r.outputs; ++i) {
            double ref_i = ref.out[i], d = fabs((double)r.out[i] - ref_i);
            if (!isfinite(d)) {
                if (!nonfinite++) bad = i;
                continue;
            }
            double e = d / (eps * (fabs(ref_i) + rms));
            if (d > max_abs) max_abs = d;
            if (e > worst) worst = e, at = i;
        }
        if (!ref_finite) {
            printf("%s %s: forward not compared: FP32's own outputs are not finite\n", name, m);
        } else {
            check(nonfinite == 0, name, m, "outputs finite (%zu not, first at %zu: %g, FP32 %g)",
                  nonfinite, bad, r.out[bad], ref.out[bad]);
            check(worst <= K, name, m,
                  "forward within %.3g eps of FP32: worst %.3g eps at %zu (%.9g vs %.9g), max abs %.3g",
                  K, worst, at, r.out[at], ref.out[at], max_abs);
            if (r.half_layers > 0)
                check(strcmp(r.output_hash, ref.output_hash) != 0, name, m,
                      "%d half layers change the outputs (%s FP32 bit-for-bit)", r.half_layers,
                      strcmp(r.output_hash, ref.output_hash) ? "not" : "still");
        }
        if (ref_loss_finite)
            check(isfinite(r.loss[0]) && isfinite(r.loss[1]), name, m,
                  "training losses finite: %.9g %.9g (FP32 %.9g %.9g; scale %g, %d skipped)",
                  r.loss[0], r.loss[1], ref.loss[0], ref.loss[1], r.scale, r.skips);
        else
            printf("%s %s: losses %.9g %.9g not judged: FP32's own are not finite (%.9g %.9g)%s\n",
                   name, m, r.loss[0], r.loss[1], ref.loss[0], ref.loss[1],
                   strcmp(ref.truth, "none") ? "" : ": no loss layer, darknet divides 0 by 0");
        printf("%s %s: %d half layers (%d oneDNN), fell back to float32: %s\n", name, m,
               r.half_layers, r.onednn_layers, r.fallback);
        if (strcmp(r.fallback, "-")) snprintf(fallback, sizeof fallback, "%s", r.fallback);
        if (len < sizeof summary - 128)
            len += snprintf(summary + len, sizeof summary - len,
                            " %s worst=%.3geps max_abs=%.3g loss1=%.6g skips=%d", m, worst, max_abs,
                            r.loss[0], r.skips);
        free(r.out);
    }
    /* darknet's train_network returns 0/0 for a network without a cost */
    const char *note = !ref_finite ? " (FP32 outputs not finite: forward not compared)"
                       : !ref_loss_finite && !strcmp(ref.truth, "none")
                           ? " (no loss layer, darknet's loss is 0/0: training not judged)"
                       : !ref_loss_finite ? " (FP32 loss not finite: training not judged)"
                                          : "";
    printf("RESULT %s %s%s fp32 loss1=%.6g%s fallback=%s\n", name, failures ? "fail" : "ok", note,
           ref.loss[0], summary, fallback);
    free(ref.out);
    return failures != 0;
}
