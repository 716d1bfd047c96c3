/*
 * gen_dataset: deterministic synthetic object-detection dataset in darknet
 * (YOLO) layout: filled circles, squares and upward triangles on textured
 * backgrounds, written as uncompressed PNGs plus YOLO label files.
 *
 * Build: gcc -std=c99 -O2 -D_POSIX_C_SOURCE=200809L -o gen_dataset gen_dataset.c -lm
 * Usage: gen_dataset [--seed N] [--train 500] [--valid 100] [--size 128] [--large] OUTDIR
 *
 * --large: objects from a quarter of the image to all of it on each side, of
 * aspect ratios from 1:3 to 3:1 (ellipses, rectangles, stretched triangles;
 * the class names stay), at most two an image: the boxes that the largest
 * anchors of a cfg made for a bigger input learn from. Without it every
 * object is 11-44% of the image and as wide as tall, and the output is what
 * it always was.
 *
 * Pixels and labels are computed with integer arithmetic only, so the output
 * is byte-identical across compilers, libcs and CPUs.
 */
/* realpath() is XSI; glibc hides it under plain _POSIX_C_SOURCE. */
#ifndef _XOPEN_SOURCE
#define _XOPEN_SOURCE 700
#endif
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#define MAX_OBJECTS 4
#define PLACE_TRIES 50
#define COLOUR_TRIES 64
#define MIN_CONTRAST 60 /* luma distance from the local background mean */
#define MIN_SEPARATION 20 /* luma distance from the local background range */
#define PIXEL_NOISE 8
#define MAX_COUNT 100000 /* keeps indices within the 5-digit file names */
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

enum { CLS_CIRCLE, CLS_SQUARE, CLS_TRIANGLE, NUM_CLASSES }; /* shapes.names order */

/* ---------- PRNG: splitmix64, chosen for its tiny, portable definition */

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static uint64_t rng_next(uint64_t *s)
{
    *s += 0x9E3779B97F4A7C15ULL;
    return mix64(*s);
}

/* Uniform integer in [lo, hi]; multiply-shift instead of % avoids bias. */
static int rng_range(uint64_t *s, int lo, int hi)
{
    uint64_t span = (uint64_t)(hi - lo) + 1;
    return lo + (int)(((rng_next(s) >> 32) * span) >> 32);
}

/* ---------- file helpers: a half-written dataset is useless, so die */

static void die_path(const char *path)
{
    fprintf(stderr, "gen_dataset: %s: %s\n", path, strerror(errno));
    exit(1);
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n);
    if (!p)
        die_path("malloc");
    return p;
}

static FILE *open_or_die(const char *path, const char *mode)
{
    FILE *f = fopen(path, mode);
    if (!f)
        die_path(path);
    return f;
}

/* fprintf/fputs errors are sticky in ferror(), so one check at close suffices. */
static void close_or_die(FILE *f, const char *path)
{
    int bad = ferror(f);
    if (fclose(f) != 0 || bad)
        die_path(path);
}

static void mkdir_p(const char *path)
{
    char *tmp = xmalloc(strlen(path) + 1);
    strcpy(tmp, path);
    for (char *p = tmp + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char saved = *p;
        struct stat st;
        *p = '\0';
        /* some file systems refuse mkdir on an existing directory with an
         * error other than EEXIST, so ask stat before giving up */
        if (mkdir(tmp, 0777) != 0) {
            int e = errno;
            if (stat(tmp, &st) != 0 || !S_ISDIR(st.st_mode)) {
                errno = e == EEXIST ? ENOTDIR : e;
                die_path(tmp);
            }
        }
        if ((*p = saved) == '\0')
            break;
    }
    free(tmp);
}

/* ---------- PNG writer: stored deflate blocks, so no compression library */

struct png_writer {
    uint32_t crc_table[256];
    unsigned char *buf;
    size_t len;
};

static void png_init(struct png_writer *w, int size)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        w->crc_table[n] = c;
    }
    size_t raw = (size_t)size * (3 * (size_t)size + 1);
    w->buf = xmalloc(8 + 25 + 12 + 2 + raw + 5 * (raw / 65535 + 1) + 4 + 12);
}

static void put_u32(unsigned char *p, uint32_t v)
{
    for (int k = 0; k < 4; k++)
        p[k] = (unsigned char)(v >> (24 - 8 * k));
}

static void put_bytes(struct png_writer *w, const void *d, size_t n)
{
    memcpy(w->buf + w->len, d, n);
    w->len += n;
}

static size_t chunk_begin(struct png_writer *w, const char *type)
{
    size_t start = w->len;
    w->len += 4; /* length is patched in by chunk_end once known */
    put_bytes(w, type, 4);
    return start;
}

static void chunk_end(struct png_writer *w, size_t start)
{
    uint32_t c = 0xFFFFFFFFu;
    put_u32(w->buf + start, (uint32_t)(w->len - start - 8));
    for (size_t i = start + 4; i < w->len; i++) /* CRC covers type + data */
        c = w->crc_table[(c ^ w->buf[i]) & 0xFF] ^ (c >> 8);
    put_u32(w->buf + w->len, c ^ 0xFFFFFFFFu);
    w->len += 4;
}

static void png_encode(struct png_writer *w, const unsigned char *rgb, int size)
{
    static const unsigned char sig[8] = {137, 'P', 'N', 'G', '\r', '\n', 26, '\n'};
    unsigned char ihdr[13] = {0, 0, 0, 0, 0, 0, 0, 0, 8, 2, 0, 0, 0}; /* 8-bit RGB */
    size_t row = 3 * (size_t)size + 1, raw = row * (size_t)size, pos = 0, c;
    uint32_t a = 1, b = 0; /* Adler-32 of the filtered scanline stream */
    put_u32(ihdr, (uint32_t)size);
    put_u32(ihdr + 4, (uint32_t)size);
    w->len = 0;
    put_bytes(w, sig, 8);
    c = chunk_begin(w, "IHDR");
    put_bytes(w, ihdr, 13);
    chunk_end(w, c);
    c = chunk_begin(w, "IDAT");
    put_bytes(w, "\x78\x01", 2); /* zlib header: deflate, 32K window */
    do {
        size_t n = MIN(raw - pos, 65535);
        unsigned char hdr[5] = {(unsigned char)(pos + n == raw), /* BFINAL, BTYPE=00 */
                                (unsigned char)n, (unsigned char)(n >> 8),
                                (unsigned char)~n, (unsigned char)(~n >> 8)};
        put_bytes(w, hdr, 5);
        for (size_t end = pos + n; pos < end; pos++) {
            size_t y = pos / row, x = pos % row;
            /* every scanline starts with filter type 0 (None) */
            unsigned char v = x ? rgb[y * (row - 1) + x - 1] : 0;
            w->buf[w->len++] = v;
            a = (a + v) % 65521;
            b = (b + a) % 65521;
        }
    } while (pos < raw);
    put_u32(w->buf + w->len, (b << 16) | a);
    w->len += 4;
    chunk_end(w, c);
    chunk_end(w, chunk_begin(w, "IEND"));
}

/* ---------- image synthesis */

struct object {
    int cls, x0, y0, s, h;  /* placement box: s wide, h tall */
    int bx0, by0, bx1, by1; /* inclusive extent of the drawn pixels */
};

/* Inside test for pixel (lx, ly) of the placement box, evaluated at pixel
 * centres in doubled coordinates so that everything stays integral. */
static int shape_inside(const struct object *o, int lx, int ly)
{
    int px = 2 * lx + 1, py = 2 * ly + 1, s = o->s;
    if (o->cls == CLS_CIRCLE) { /* the ellipse inscribed in the s x h box */
        long long dx = px - s, dy = py - o->h, w2 = (long long)s * s, h2 = (long long)o->h * o->h;
        return dx * dx * h2 + dy * dy * w2 <= w2 * h2;
    }
    if (o->cls == CLS_TRIANGLE) /* apex at top centre, base = full width */
        return abs(px - s) * 2 * o->h <= s * py;
    return 1;
}

static int luma(const unsigned char *p) { return (77 * p[0] + 150 * p[1] + 29 * p[2]) >> 8; }
static unsigned char clamp8(int v) { return (unsigned char)MIN(MAX(v, 0), 255); }

/* Value-noise lattice value in [-amp, amp], hashed so no table is needed. */
static int lattice(uint64_t key, int i, int j, int amp)
{
    uint64_t h = mix64(key ^ ((uint64_t)i * 0x9E3779B97F4A7C15ULL)
                           ^ ((uint64_t)j * 0xC2B2AE3D27D4EB4FULL));
    return (int)((h & 0xFF) * (uint64_t)(2 * amp + 1) >> 8) - amp;
}

static int value_noise(uint64_t key, int x, int y, int p, int amp)
{
    int i = x / p, j = y / p, fx = x % p, fy = y % p;
    long v = (long)lattice(key, i, j, amp) * (p - fx) * (p - fy)
           + (long)lattice(key, i + 1, j, amp) * fx * (p - fy)
           + (long)lattice(key, i, j + 1, amp) * (p - fx) * fy
           + (long)lattice(key, i + 1, j + 1, amp) * fx * fy;
    return (int)(v / ((long)p * p));
}

/* Two-colour linear gradient plus one texture: value noise, stripes or checker. */
static void draw_background(unsigned char *img, int size, uint64_t *rng)
{
    int c0[3], c1[3], gx, gy, m = size - 1;
    for (int k = 0; k < 3; k++) {
        c0[k] = rng_range(rng, 20, 235);
        c1[k] = rng_range(rng, 20, 235);
    }
    do {
        gx = rng_range(rng, -8, 8);
        gy = rng_range(rng, -8, 8);
    } while (gx == 0 && gy == 0);
    int pmin = MIN(gx * m, 0) + MIN(gy * m, 0), pmax = MAX(gx * m, 0) + MAX(gy * m, 0);
    int kind = rng_range(rng, 0, 2), amp = rng_range(rng, 8, 22);
    int period = rng_range(rng, 4 * size / 128 + 2, 24 * size / 128 + 2);
    int noise_p = rng_range(rng, 8 * size / 128 + 2, 32 * size / 128 + 2);
    int sx = rng_range(rng, -2, 2), sy = rng_range(rng, sx ? -2 : 1, 2);
    uint64_t key = rng_next(rng);

    for (int y = 0; y < size; y++)
        for (int x = 0; x < size; x++) {
            int t = (gx * x + gy * y - pmin) * 255 / (pmax - pmin), tex;
            if (kind == 0)
                tex = value_noise(key, x, y, noise_p, amp)
                    + value_noise(key ^ 1, x, y, noise_p / 2 + 1, amp / 2);
            else if (kind == 1) /* the 4*size offset keeps the dividend >= 0 */
                tex = ((sx * x + sy * y + 4 * size) / period) & 1 ? amp : -amp;
            else
                tex = ((x / period + y / period) & 1) ? amp : -amp;
            unsigned char *p = img + 3 * ((size_t)y * size + x);
            for (int k = 0; k < 3; k++)
                p[k] = clamp8(c0[k] + (c1[k] - c0[k]) * t / 255 + tex);
        }
}

/* Saturated colour far in luma from the background under the box: the mean
 * rule is mandatory, lying outside the local luma range is preferred so that
 * objects straddling a gradient or another object stay distinguishable. */
static void pick_colour(uint64_t *rng, int mean, int lmin, int lmax, unsigned char out[3])
{
    int best = INT_MIN;
    for (int tries = 0; tries < COLOUR_TRIES; tries++) {
        int v = rng_range(rng, 100, 255), lo = rng_range(rng, 0, v / 4);
        int hue = rng_range(rng, 0, 6 * 256 - 1), f = hue & 255;
        int up = lo + (v - lo) * f / 255, down = lo + (v - lo) * (255 - f) / 255;
        int rgb[6][3] = {{v, up, lo}, {down, v, lo}, {lo, v, up},
                         {lo, down, v}, {up, lo, v}, {v, lo, down}};
        unsigned char c[3] = {(unsigned char)rgb[hue >> 8][0],
                              (unsigned char)rgb[hue >> 8][1],
                              (unsigned char)rgb[hue >> 8][2]};
        int y = luma(c), sep = MAX(lmin - y, y - lmax);
        int score = MIN(abs(y - mean) - MIN_CONTRAST, sep - MIN_SEPARATION);
        if (score > best) {
            best = score;
            memcpy(out, c, 3);
        }
        if (score >= 0)
            return;
    }
    if (abs(luma(out) - mean) >= MIN_CONTRAST)
        return;
    /* Yellow (luma 226) or dark blue (luma 18): one is always >= 104 away. */
    static const unsigned char bright[3] = {255, 255, 0}, dark[3] = {0, 0, 160};
    memcpy(out, mean < 122 ? bright : dark, 3);
}

/* A plain IoU <= 0.1 limit would still let a big shape cover most of a small
 * one; capping the overlap at 10% of the smaller box implies IoU <= 0.1 and
 * keeps every object's box at least 90% unoccluded. */
static int overlaps_too_much(const struct object *a, const struct object *b)
{
    int ix = MIN(a->bx1, b->bx1) - MAX(a->bx0, b->bx0) + 1;
    int iy = MIN(a->by1, b->by1) - MAX(a->by0, b->by0) + 1;
    long ua = (long)(a->bx1 - a->bx0 + 1) * (a->by1 - a->by0 + 1);
    long ub = (long)(b->bx1 - b->bx0 + 1) * (b->by1 - b->by0 + 1);
    return ix > 0 && iy > 0 && 10L * ix * iy > MIN(ua, ub);
}

/* Draws up to MAX_OBJECTS shapes into img (two with large); returns how many
 * were placed. */
static int draw_objects(unsigned char *img, int size, int large, uint64_t *rng,
                        struct object *objs)
{
    int smin = (14 * size + 64) / 128, smax = (56 * size + 64) / 128;
    if (large)
        smin = (size + 3) / 4, smax = size;
    int want = rng_range(rng, 1, large ? 2 : MAX_OBJECTS), n = 0;
    for (int k = 0; k < want; k++) {
        struct object o;
        int placed = 0;
        for (int t = 0; t < PLACE_TRIES && !placed; t++) {
            o.cls = rng_range(rng, 0, NUM_CLASSES - 1);
            o.s = rng_range(rng, smin, smax);
            /* equilateral-looking triangle: height = side * sqrt(3)/2 */
            o.h = o.cls == CLS_TRIANGLE ? (o.s * 866 + 500) / 1000 : o.s;
            if (large) /* height of its own, 1:3 to 3:1 against the width */
                o.h = rng_range(rng, MAX(smin, (o.s + 2) / 3), MIN(smax, 3 * o.s));
            o.x0 = rng_range(rng, 0, size - o.s);
            o.y0 = rng_range(rng, 0, size - o.h);
            /* label = rasterised extent, e.g. an even-width triangle has no
             * pixel in its top row, so scan rather than trust the box */
            o.bx0 = o.by0 = size;
            o.bx1 = o.by1 = -1;
            for (int ly = 0; ly < o.h; ly++)
                for (int lx = 0; lx < o.s; lx++)
                    if (shape_inside(&o, lx, ly)) {
                        o.bx0 = MIN(o.bx0, o.x0 + lx), o.bx1 = MAX(o.bx1, o.x0 + lx);
                        o.by0 = MIN(o.by0, o.y0 + ly), o.by1 = MAX(o.by1, o.y0 + ly);
                    }
            placed = 1;
            for (int j = 0; j < n && placed; j++)
                placed = !overlaps_too_much(&o, &objs[j]);
        }
        if (!placed)
            continue;
        long sum = 0, cnt = 0;
        int lmin = 255, lmax = 0;
        for (int y = o.by0; y <= o.by1; y++)
            for (int x = o.bx0; x <= o.bx1; x++, cnt++) {
                int l = luma(img + 3 * ((size_t)y * size + x));
                sum += l, lmin = MIN(lmin, l), lmax = MAX(lmax, l);
            }
        unsigned char col[3];
        pick_colour(rng, (int)(sum / cnt), lmin, lmax, col);
        for (int ly = 0; ly < o.h; ly++)
            for (int lx = 0; lx < o.s; lx++)
                if (shape_inside(&o, lx, ly))
                    memcpy(img + 3 * ((size_t)(o.y0 + ly) * size + o.x0 + lx), col, 3);
        objs[n++] = o;
    }
    return n;
}

/* Prints num/den with 6 decimals, rounded half up, in integers so that the
 * text cannot depend on the libc's float formatting. */
static void print_norm(FILE *f, long num, long den)
{
    unsigned long long q = ((unsigned long long)num * 2000000ULL + (unsigned long long)den)
                         / (2ULL * (unsigned long long)den);
    fprintf(f, " %llu.%06llu", q / 1000000ULL, q % 1000000ULL);
}

/* ---------- driver */

/* strtoull silently negates "-1", hence the explicit sign check. */
static int parse_num(const char *s, unsigned long long lo, unsigned long long hi,
                     unsigned long long *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || end == s || *end || *s == '-' || v < lo || v > hi)
        return 0;
    *out = v;
    return 1;
}

int main(int argc, char **argv)
{
    static const char *const opt[4] = {"--seed", "--train", "--valid", "--size"};
    int large = 0;
    static const unsigned long long lo[4] = {0, 0, 0, 32};
    static const unsigned long long hi[4] = {ULLONG_MAX, MAX_COUNT, MAX_COUNT, 4096};
    unsigned long long val[4] = {1, 500, 100, 128}; /* defaults */
    const char *outdir = NULL;
    int bad = 0;
    for (int i = 1; i < argc && !bad; i++) {
        int k = 0;
        while (k < 4 && strcmp(argv[i], opt[k]) != 0)
            k++;
        if (k < 4)
            bad = !(i + 1 < argc && parse_num(argv[++i], lo[k], hi[k], &val[k]));
        else if (strcmp(argv[i], "--large") == 0)
            large = 1;
        else if (argv[i][0] != '-' && argv[i][0] != '\0' && !outdir)
            outdir = argv[i];
        else
            bad = 1;
    }
    if (bad || !outdir) {
        fprintf(stderr, "usage: gen_dataset [--seed N] [--train 500] [--valid 100] "
                        "[--size 128] [--large] OUTDIR\n");
        return 2;
    }
    long counts[2] = {(long)val[1], (long)val[2]}, total = 0;
    uint64_t seed = val[0];
    mkdir_p(outdir);
    char *root = realpath(outdir, NULL);
    if (!root)
        die_path(outdir);
    size_t cap = strlen(root) + 64;
    char *path = xmalloc(cap), *list_path = xmalloc(cap);
    static const char *const subdirs[3] = {"images", "labels", "backup"};
    for (int k = 0; k < 3; k++) {
        snprintf(path, cap, "%s/%s", root, subdirs[k]);
        mkdir_p(path);
    }
    snprintf(path, cap, "%s/shapes.names", root);
    FILE *f = open_or_die(path, "w");
    fputs("circle\nsquare\ntriangle\n", f);
    close_or_die(f, path);
    snprintf(path, cap, "%s/shapes.data", root);
    f = open_or_die(path, "w");
    fprintf(f, "classes = %d\ntrain = %s/train.txt\nvalid = %s/valid.txt\n"
               "names = %s/shapes.names\nbackup = %s/backup\n",
            NUM_CLASSES, root, root, root, root);
    close_or_die(f, path);

    int sz = (int)val[3];
    unsigned char *img = xmalloc((size_t)sz * sz * 3);
    struct png_writer png;
    png_init(&png, sz);
    static const char *const splits[2] = {"train", "valid"};
    for (int sp = 0; sp < 2; sp++) {
        snprintf(list_path, cap, "%s/%s.txt", root, splits[sp]);
        FILE *list = open_or_die(list_path, "w");
        for (long idx = 0; idx < counts[sp]; idx++) {
            /* One stream per (seed, split, index), so --train never
             * perturbs the valid images and vice versa. */
            uint64_t rng = mix64(mix64(mix64(seed) + (uint64_t)sp + 1) + (uint64_t)idx);
            struct object objs[MAX_OBJECTS];
            draw_background(img, sz, &rng);
            int n = draw_objects(img, sz, large, &rng, objs);
            total += n;
            for (size_t i = 0; i < (size_t)sz * sz * 3; i += 3) {
                uint64_t r = rng_next(&rng);
                for (int k = 0; k < 3; k++) {
                    int d = (int)(((r >> (8 * k)) & 0xFF) * (2 * PIXEL_NOISE + 1) >> 8);
                    img[i + k] = clamp8(img[i + k] + d - PIXEL_NOISE);
                }
            }

            snprintf(path, cap, "%s/labels/%s_%05ld.txt", root, splits[sp], idx);
            f = open_or_die(path, "w");
            for (int j = 0; j < n; j++) {
                const struct object *o = &objs[j];
                fprintf(f, "%d", o->cls);
                print_norm(f, o->bx0 + o->bx1 + 1, 2L * sz); /* box edges are */
                print_norm(f, o->by0 + o->by1 + 1, 2L * sz); /* pixel borders */
                print_norm(f, o->bx1 - o->bx0 + 1, sz);
                print_norm(f, o->by1 - o->by0 + 1, sz);
                fputc('\n', f);
            }
            close_or_die(f, path);

            png_encode(&png, img, sz);
            snprintf(path, cap, "%s/images/%s_%05ld.png", root, splits[sp], idx);
            f = open_or_die(path, "wb");
            if (fwrite(png.buf, 1, png.len, f) != png.len)
                die_path(path);
            close_or_die(f, path);
            fprintf(list, "%s\n", path);
        }
        close_or_die(list, list_path);
    }
    printf("gen_dataset: wrote %ld train + %ld valid images (%ld objects) to %s\n",
           counts[0], counts[1], total, root);
    free(png.buf);
    free(img);
    free(path);
    free(list_path);
    free(root);
    return 0;
}
