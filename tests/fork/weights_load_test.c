/* Checked weights loading (patches/0011-checked-weights-load.patch):
 * - every cfg given loads its own saved weights exactly (the size the loader
 *   expects is the size save_weights writes, for every layer type in them);
 * - a file cut short anywhere, one with bytes left over, one for another cfg,
 *   and one cut at a layer boundary with seen != 0 are refused, naming the
 *   file and the bytes needed and found, and the network is left untouched;
 * - a prefix file (cut at a layer boundary with seen 0, as `darknet partial`
 *   writes) loads its layers and leaves the others as they were;
 * - explicit partial loads (cutoff < n, start > 0) read a longer file, as
 *   upstream does; so does a network with a dontload layer (a head replaced
 *   for fine-tuning); a network's own save without its dontsave layers loads;
 *   a header with seen 0 and nothing after it is not a prefix.
 *
 *   weights_load_test SCRATCH CFG [CFG...]   (the first CFG gets the refusals)
 */
#include "darknet.h"

#include "check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *scratch;

/* A file's bytes (NULL when it cannot be read); *n its size. */
static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(size > 0 ? (size_t)size : 1);
    *n = b ? fread(b, 1, (size_t)size, f) : 0;
    fclose(f);
    return b;
}

static int spit(const char *path, const unsigned char *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int bad = fwrite(b, 1, n, f) != n;
    return fclose(f) != 0 || bad ? -1 : 0;
}

static void path_in(char *out, size_t size, const char *name)
{
    snprintf(out, size, "%s/%s", scratch, name);
}

/* The network's weights as save_weights writes them, header included. */
static unsigned char *snapshot(network *net, size_t *n)
{
    char p[1024];
    path_in(p, sizeof p, "snapshot.weights");
    save_weights(net, p);
    return slurp(p, n);
}

/* 1 when the two snapshots agree past the header (its seen may differ). */
static int same_weights(const unsigned char *a, size_t na, const unsigned char *b, size_t nb)
{
    const size_t head = 3 * sizeof(int) + sizeof(size_t);
    return a && b && na == nb && na >= head && !memcmp(a + head, b + head, na - head);
}

static network *fresh(const char *cfg, unsigned seed)
{
    srand(seed); /* darknet's initial weights come from rand() */
    network *net = parse_network_cfg((char *)cfg);
    return net;
}

/* load_weights_checked on a fresh network: the status, its message in err,
 * and whether the network's weights were left as they were. */
static int load(const char *cfg, const char *file, int start, int cutoff, char *err, size_t errlen,
                int *untouched)
{
    network *net = fresh(cfg, 7);
    size_t nb, na;
    unsigned char *before = snapshot(net, &nb);
    err[0] = 0;
    int r = load_weights_checked(net, (char *)file, start, cutoff < 0 ? net->n : cutoff, err,
                                 errlen);
    unsigned char *after = snapshot(net, &na);
    *untouched = same_weights(before, nb, after, na);
    free(before);
    free(after);
    free_network(net);
    return r;
}

static void round_trip(const char *cfg)
{
    char p[1024], err[1024];
    network *src = fresh(cfg, 1);
    *src->seen = 4242;
    path_in(p, sizeof p, "round_trip.weights");
    save_weights(src, p);
    size_t ns, nd;
    unsigned char *saved = slurp(p, &ns);
    network *dst = fresh(cfg, 2);
    int r = load_weights_checked(dst, p, 0, dst->n, err, sizeof err);
    unsigned char *loaded = snapshot(dst, &nd);
    CHECK(r == 0 && *dst->seen == 4242 && same_weights(saved, ns, loaded, nd),
          "%s: its own %zu-byte weights file loads in full, bit for bit (status %d, seen %zu%s%s)",
          cfg, ns, r, *dst->seen, err[0] ? ": " : "", err);
    free(saved);
    free(loaded);
    free_network(src);
    free_network(dst);
}

static void refusals(const char *cfg, const char *other_cfg)
{
    char full[1024], cut[1024], err[1024];
    network *src = fresh(cfg, 1);
    *src->seen = 640;
    path_in(full, sizeof full, "full.weights");
    path_in(cut, sizeof cut, "cut.weights");
    save_weights(src, full);
    size_t n;
    unsigned char *bytes = slurp(full, &n);
    int untouched;

    /* Cut short: nowhere is a short file accepted. */
    const size_t cuts[] = {0, 3, 12, 19, 20, 21, n / 7, n / 3, n / 2, n - 4, n - 1};
    int refused = 0, named = 0, kept = 0, tried = 0;
    char example[1024] = "";
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; ++i) {
        if (cuts[i] >= n) continue;
        spit(cut, bytes, cuts[i]);
        ++tried;
        int r = load(cfg, cut, 0, -1, err, sizeof err, &untouched);
        char need[64], has[64];
        snprintf(need, sizeof need, "%zu", n);
        snprintf(has, sizeof has, "has %zu", cuts[i]);
        refused += r != 0;
        named += r != 0 && strstr(err, cut) && strstr(err, "truncated") &&
                 (cuts[i] < 20 || (strstr(err, need) && strstr(err, has)));
        kept += untouched;
        if (cuts[i] == n / 3) snprintf(example, sizeof example, "%s", err);
    }
    CHECK(refused == tried && named == tried && kept == tried,
          "a %zu-byte file cut to 0..%zu bytes: %d of %d refused, %d named the file and the bytes, "
          "%d left the network untouched; e.g. \"%s\"",
          n, n - 1, refused, tried, named, kept, example);

    /* Bytes left over: the file is not this network's. */
    const size_t extra[] = {1, 4, 1000};
    refused = named = kept = 0;
    for (size_t i = 0; i < 3; ++i) {
        unsigned char *longer = calloc(n + extra[i], 1);
        memcpy(longer, bytes, n);
        spit(cut, longer, n + extra[i]);
        free(longer);
        int r = load(cfg, cut, 0, -1, err, sizeof err, &untouched);
        refused += r != 0;
        named += r != 0 && strstr(err, cut) && strstr(err, "left over");
        kept += untouched;
    }
    CHECK(refused == 3 && named == 3 && kept == 3,
          "1, 4 and 1000 bytes left over: %d of 3 refused naming the file and the bytes left over, "
          "%d untouched; e.g. \"%s\"", refused, kept, err);

    /* Another cfg's weights. */
    if (other_cfg) {
        network *o = fresh(other_cfg, 1);
        save_weights(o, cut);
        free_network(o);
        int r = load(cfg, cut, 0, -1, err, sizeof err, &untouched);
        CHECK(r != 0 && strstr(err, cut) && untouched,
              "the weights of %s refused for %s, network untouched: \"%s\"", other_cfg, cfg, err);
    }

    /* Cut at a layer boundary: a prefix only when seen is 0. */
    int k = src->n / 2;
    while (k > 1 && src->layers[k - 1].type != CONVOLUTIONAL &&
           src->layers[k - 1].type != CONNECTED)
        --k;
    save_weights_upto(src, cut, k);
    int r = load(cfg, cut, 0, -1, err, sizeof err, &untouched);
    CHECK(r != 0 && strstr(err, "ends before layer") && strstr(err, "seen 0") && untouched,
          "a file of layers 0-%d with seen 640 is refused as truncated, untouched: \"%s\"", k - 1,
          err);

    *src->seen = 0;
    save_weights_upto(src, cut, k);
    network *dst = fresh(cfg, 9);
    size_t nb;
    unsigned char *before = snapshot(dst, &nb);
    r = load_weights_checked(dst, cut, 0, dst->n, err, sizeof err);
    int first_from_file = 1, rest_kept = 1;
    for (int i = 0; i < dst->n; ++i) {
        const layer *a = &dst->layers[i], *s = &src->layers[i];
        if (!a->weights || !a->nweights) continue;
        const int from_file = !memcmp(a->weights, s->weights, a->nweights * sizeof(float));
        if (i < k) first_from_file &= from_file;
        else rest_kept &= !from_file;
    }
    size_t na;
    unsigned char *after = snapshot(dst, &na);
    CHECK(r == 0 && first_from_file && rest_kept && !same_weights(before, nb, after, na),
          "a prefix file (layers 0-%d, seen 0, as darknet partial writes) loads: layers 0-%d from "
          "the file %s, the rest keep their weights %s (status %d %s)",
          k - 1, k - 1, first_from_file ? "yes" : "NO", rest_kept ? "yes" : "NO", r, err);
    free(before);
    free(after);
    free_network(dst);

    /* Partial loads from a longer file, as upstream allows. */
    r = load(cfg, full, 0, k, err, sizeof err, &untouched);
    CHECK(r == 0 && !untouched, "cutoff %d of %d reads a prefix of the full file (status %d %s)", k,
          src->n, r, err);
    r = load(cfg, full, 1, -1, err, sizeof err, &untouched);
    CHECK(r == 0, "start 1 reads the file from its start into layers 1.. (oneoff2; status %d %s)", r,
          err);

    /* A missing file: an error, not an exit. */
    path_in(cut, sizeof cut, "no_such.weights");
    r = load(cfg, cut, 0, -1, err, sizeof err, &untouched);
    CHECK(r != 0 && strstr(err, cut) && untouched, "a missing file is an error naming it: \"%s\"",
          err);
    free(bytes);
    free_network(src);
}

static void write_cfg(const char *path, const char *layers)
{
    FILE *f = fopen(path, "w");
    if (!f) return;
    fprintf(f, "[net]\nbatch=1\nwidth=8\nheight=8\nchannels=3\n\n%s", layers);
    fclose(f);
}

/* dontload, dontsave and a first layer without weights (cfgs written here). */
static void flags(void)
{
    char a[1024], b[1024], c[1024], d[1024], w[1024], err[1024];
    path_in(a, sizeof a, "head10.cfg");
    path_in(b, sizeof b, "head4_dontload.cfg");
    path_in(c, sizeof c, "dontsave.cfg");
    path_in(d, sizeof d, "pool_first.cfg");
    path_in(w, sizeof w, "flags.weights");
    const char *body = "[convolutional]\nfilters=8\nsize=3\npad=1\nactivation=leaky\n\n";
    char text[512];
    write_cfg(a, (snprintf(text, sizeof text, "%s[convolutional]\nfilters=10\nsize=1\n", body), text));
    write_cfg(b, (snprintf(text, sizeof text, "%s[convolutional]\nfilters=4\nsize=1\ndontload=1\n",
                           body), text));
    write_cfg(c, (snprintf(text, sizeof text, "%s[convolutional]\nfilters=6\nsize=1\ndontsave=1\n",
                           body), text));
    write_cfg(d, "[maxpool]\nsize=2\nstride=2\n\n[convolutional]\nfilters=4\nsize=1\n");

    /* A pretrained backbone with another head: the head is dontload. */
    network *src = fresh(a, 1), *dst = fresh(b, 2);
    *src->seen = 700;
    save_weights(src, w);
    float *head = malloc(dst->layers[1].nweights * sizeof(float));
    memcpy(head, dst->layers[1].weights, dst->layers[1].nweights * sizeof(float));
    int r = load_weights_checked(dst, w, 0, dst->n, err, sizeof err);
    int body_ok = !memcmp(dst->layers[0].weights, src->layers[0].weights,
                          dst->layers[0].nweights * sizeof(float));
    int head_kept = !memcmp(dst->layers[1].weights, head, dst->layers[1].nweights * sizeof(float));
    CHECK(r == 0 && body_ok && head_kept,
          "a 10-filter head's file into a cfg whose 4-filter head is dontload: loaded (status %d "
          "%s), the backbone from the file %s, the head kept %s", r, err, body_ok ? "yes" : "NO",
          head_kept ? "yes" : "NO");
    free(head);
    free_network(src);
    free_network(dst);

    /* The network's own save, which leaves out its dontsave layer. */
    src = fresh(c, 1);
    *src->seen = 900;
    save_weights(src, w);
    dst = fresh(c, 2);
    r = load_weights_checked(dst, w, 0, dst->n, err, sizeof err);
    body_ok = !memcmp(dst->layers[0].weights, src->layers[0].weights,
                      dst->layers[0].nweights * sizeof(float));
    CHECK(r == 0 && body_ok && *dst->seen == 900,
          "its own save without its dontsave layer (seen 900) loads: status %d %s, layer 0 from "
          "the file %s", r, err, body_ok ? "yes" : "NO");
    free_network(src);
    free_network(dst);

    /* A header with seen 0 and no weights, for a network whose first layer
     * has none: not a prefix of anything. */
    const int head_ints[3] = {0, 2, 0};
    const size_t zero = 0;
    unsigned char hdr[sizeof head_ints + sizeof zero];
    memcpy(hdr, head_ints, sizeof head_ints);
    memcpy(hdr + sizeof head_ints, &zero, sizeof zero);
    spit(w, hdr, sizeof hdr);
    int untouched;
    r = load(d, w, 0, -1, err, sizeof err, &untouched);
    CHECK(r != 0 && untouched, "a bare header with seen 0 before a weightless first layer is "
          "refused: \"%s\"", err);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s SCRATCH CFG [CFG...]\n", argv[0]);
        return 2;
    }
    scratch = argv[1];
    mkdir(scratch, 0755);
    gpu_index = -1;
    for (int i = 2; i < argc; ++i) round_trip(argv[i]);
    refusals(argv[2], argc > 3 ? argv[3] : NULL);
    flags();
    return check_report();
}
