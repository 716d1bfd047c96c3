/* fuzz.labels: the fork's label reader (darknet's src/labels.c, patch 0029):
 * labels_parse, labels_read_file and label_path.
 *
 * Each input is one of three kinds:
 * - 7 in 10, a label file's text: 0 to 8 lines from a corpus (good boxes,
 *   boxes at and past the image's edges, NaN, inf, 1e30, -0, hex floats,
 *   classes -1, 80, 2^31 and 1.0, 3 and 6 numbers, text, tabs and blank
 *   lines), joined by \n or \r\n, with or without a last newline, then
 *   mutated (mutate.h) 3 times in 5; read by labels_parse from a block of
 *   exactly its length (no NUL after it, so that a read past the end is an
 *   out-of-bounds read the sanitized build stops on), with a class count
 *   of 0 (any), 1, 2, 80 or INT_MAX;
 * - 1 in 10, the same text written to SCRATCH/l.txt and read with
 *   labels_read_file, whose result must be labels_parse's on the same
 *   bytes; and a missing file and a folder refused with a reason;
 * - 2 in 10, an image's path (the corpus's paths, with upper-case
 *   extensions, no extension, dots in folders, paths of about LABEL_PATH_MAX
 *   bytes) mutated, given to label_path by both rules.
 *
 * The contract (labels.h, docs/training.md "When the data is bad"), on every
 * input, against the harness's own reading of the same text (ref_line):
 * - a line is what lies between two \n; a blank one (spaces, tabs, \r only)
 *   is not counted; every other line is a box exactly when it is five
 *   tokens (split at spaces, tabs and \r) of at most 63 bytes, none with a
 *   NUL, the first a whole decimal number in [0, classes) (any >= 0 for 0),
 *   the other four whole floats, finite, the centre in [0, 1], the width
 *   and height in (0, 1];
 * - lines, skipped, n and clipped agree; problem() is called once for each
 *   line that is not a box, with its number from 1, in order, with a
 *   non-empty printable message shorter than 160 bytes;
 * - each box, bit for bit: left, right, top and bottom from x -+ w/2 and
 *   y -+ h/2, clipped to [0, 1] (and x, y, w, h made again from them, each
 *   within 2^-22: darknet's -Ofast may fold bottom - top to h) when an edge
 *   is past the image by more than 1e-4;
 * - label_path: 1 exactly when the last component has a dot that is not
 *   its first byte and an image extension after it (.jpg .jpeg .png .bmp
 *   .ppm .tiff, any case); beside: the path up to that dot and ".txt";
 *   folder: the same with the first "images", then "JPEGImages", then
 *   "raw" made "labels", 0 when none is there; 0 when the result would not
 *   fit LABEL_PATH_MAX; nothing written past it;
 * - nothing reads or writes out of bounds (the sanitized build).
 *
 *   labels_fuzz SCRATCH [plant]   N and seed: DARKNET_AMP_FUZZ_N, DARKNET_AMP_FUZZ_SEED
 *
 * "plant" hands labels_parse one byte more than its block holds: the
 * sanitized build must stop on the first input (fuzz.labels.planted), which
 * shows that the run would see a reader that reads past its input.
 */
#include "fuzz.h"
#include "labels.h"

#include <limits.h>
#include <math.h>
#include <strings.h>
#include <sys/stat.h>

#define DEFAULT_N 100000
#define DEFAULT_SEED 20261207u
#define TEXT_MAX 8192
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static const char *const corpus[] = {
    "0 0.5 0.5 0.2 0.2", "1 0.25 0.75 0.5 0.5", "0 0 0 1 1", "0 1 1 1 1",
    "1 0.5 0.5 1 1", "0 0.99995 0.5 0.0001 0.2", "0 0.00001 0.00001 0.00002 0.00002",
    "0 0.9 0.9 0.4 0.4", "0 0.1 0.5 0.3 0.3", "1 0.5 0.02 0.2 0.0401",
    "0 nan 0.5 0.2 0.2", "0 0.5 inf 0.2 0.2", "0 1e30 0.5 0.2 0.2", "0 1.7 -0.4 0.2 0.2",
    "0 0.5 0.5 0 0.2", "0 0.5 0.5 0.2 -0.1", "0 0.5 0.5 -0 0.2", "0 -0 -0 0.5 0.5",
    "7 0.5 0.5 0.2 0.2", "-1 0.5 0.5 0.2 0.2", "80 0.5 0.5 0.2 0.2", "79 0.5 0.5 0.2 0.2",
    "2147483648 0.5 0.5 0.2 0.2", "1.0 0.5 0.5 0.2 0.2", "+1 0.5 0.5 0.2 0.2",
    "0 0x1p-1 0.5 0x1p-3 0.25", "0 5e-1 0.5 2e-1 1e-45", "0 0.5 0.5 1e-50 0.2",
    "0 0.5 0.5", "0 0.5 0.5 0.2 0.2 0.9", "person 0.5 0.5 0.2 0.2", "\x01\x02\x7f",
    "0\t0.5\t0.5\t0.2\t0.2", "  0 0.5 0.5 0.2 0.2  ", "", "   ", "\t\r", "# a comment",
    "0 0.5 0.5 0.2 0.2\r", "0 0.5 0.5 0.2 0.20000000000000000000000000000000000000000000000000000000000001",
    "0 0.5 0.5 infinity 0.2", "0 0.5 0.5 nan(1) 0.2", "00 0.5 0.5 0.2 0.2", "0 .5 .5 .2 .2"};

static const char *const dict[] = {"nan", "inf", "-inf", "-0", "1e30", "1e-45", "0x1p-3",
                                   "0.5", "1", "0", "-1", "80", "2147483648",
                                   "9223372036854775808", " ", "\t", "\r", "\r\n", "\n", "\n\n",
                                   ".", "e", "+", "images", "labels", ".jpg", ".TIFF"};

static const char *const paths[] = {
    "data/images/a.jpg",          "data/images/a.JPG",  "x/JPEGImages/b.jpeg",
    "raw/c.PNG",                  "images/raw/d.bmp",   "a.ppm",
    "/abs/images/e.tiff",         "images/f.gif",       "images/g",
    "images/.jpg",                "images.d/h.jpg",     "dir.jpg/i",
    "a/images/b/images/c.png",    "JPEGImages/x.Jpeg",  "imagesraw.jpg",
    "",                           "/",                  "images/a.jpg/",
    "data/labels/a.jpg",          "images/a.tiff.txt",  "images/a.txt.png"};

static const char *const exts[] = {"jpg", "jpeg", "png", "bmp", "ppm", "tiff"};

enum { TEXT, FILE_READ, PATH };

typedef struct input {
    int kind;
    fz_buf buf;  /* the text or the path */
    int classes;
} input;

static char scratch[4096], lpath[4200];
static int plant;
static fz_count *parse_count, *box_count, *file_count, *path_count;

static void print_input(void *ctx, FILE *out)
{
    const input *in = ctx;
    fprintf(out, "%s, classes %d, %zu bytes: ",
            in->kind == PATH ? "an image path" : in->kind == TEXT ? "label text" : "a label file",
            in->classes, in->buf.len);
    fz_print_escaped(out, in->buf.p, in->buf.len);
}

/* A path of about LABEL_PATH_MAX bytes ending in an image's name. */
static void long_path(fz_buf *b, fz_rng *r)
{
    size_t target = LABEL_PATH_MAX - 12 + fz_below(r, 24), n = 0;
    static const char tail[] = "/images/z.jpg";
    while (n + sizeof tail - 1 < target && n + 2 < b->max) {
        b->p[n++] = 'd';
        b->p[n++] = '/';
    }
    memcpy(b->p + n, tail, sizeof tail - 1);
    b->len = n + sizeof tail - 1;
    b->p[b->len] = 0;
}

static void make_input(input *in, fz_rng *r)
{
    static const int class_counts[] = {0, 1, 2, 80, INT_MAX};
    size_t k, nl;
    unsigned pick = (unsigned)fz_below(r, 10);
    in->kind = pick < 7 ? TEXT : pick < 8 ? FILE_READ : PATH;
    in->classes = class_counts[fz_below(r, COUNT(class_counts))];
    in->buf.len = 0;
    in->buf.p[0] = 0;
    if (in->kind == PATH) {
        if (fz_chance(r, 10)) long_path(&in->buf, r);
        else fz_buf_set_str(&in->buf, paths[fz_below(r, COUNT(paths))]);
        if (fz_chance(r, 60)) fz_mutate(&in->buf, r, dict, COUNT(dict), 3);
        return;
    }
    nl = fz_below(r, 9);
    {
        const char *eol = fz_chance(r, 25) ? "\r\n" : "\n";
        for (k = 0; k < nl; ++k) {
            const char *l = corpus[fz_below(r, COUNT(corpus))];
            size_t ll = strlen(l), el = strlen(eol);
            if (in->buf.len + ll + el > in->buf.max) break;
            memcpy(in->buf.p + in->buf.len, l, ll);
            in->buf.len += ll;
            if (k + 1 < nl || fz_chance(r, 70)) {
                memcpy(in->buf.p + in->buf.len, eol, el);
                in->buf.len += el;
            }
        }
        in->buf.p[in->buf.len] = 0;
    }
    if (fz_chance(r, 60)) fz_mutate(&in->buf, r, dict, COUNT(dict), 4);
}

/* ---- The harness's own reading of a line (the contract above) ---- */

static int is_sep(char c) { return c == ' ' || c == '\t' || c == '\r'; }

/* 1 when s is a whole token of the number kind: strtol (class) or strtof. */
static int ref_number(const char *s, size_t n, int whole, long *id, float *v)
{
    char t[64], *end;
    if (n == 0 || n > 63 || memchr(s, 0, n)) return 0;
    memcpy(t, s, n);
    t[n] = 0;
    errno = 0;
    if (whole) {
        *id = strtol(t, &end, 10);
        return *end == 0 && errno == 0;
    }
    *v = strtof(t, &end);
    return *end == 0;
}

static int ref_finite(float v) { return v == v && v - v == 0; }

/* 1 with the box when the line is one; -1 when it is blank; 0 otherwise. */
static int ref_line(const char *s, size_t n, int classes, box_label *b, int *clipped)
{
    const char *tok[5];
    size_t len[5], i = 0;
    int count = 0;
    float v[4];
    long id;
    while (i < n) {
        size_t start;
        if (is_sep(s[i])) { ++i; continue; }
        start = i;
        while (i < n && !is_sep(s[i])) ++i;
        if (count < 5) { tok[count] = s + start; len[count] = i - start; }
        ++count;
    }
    if (count == 0) return -1;
    if (count != 5 || !ref_number(tok[0], len[0], 1, &id, NULL)) return 0;
    if (id < 0 || (classes > 0 && id >= classes)) return 0;
    for (i = 0; i < 4; ++i)
        if (!ref_number(tok[i + 1], len[i + 1], 0, NULL, &v[i]) || !ref_finite(v[i])) return 0;
    if (v[0] < 0 || v[0] > 1 || v[1] < 0 || v[1] > 1) return 0;
    if (!(v[2] > 0 && v[2] <= 1 && v[3] > 0 && v[3] <= 1)) return 0;
    memset(b, 0, sizeof *b);
    b->id = (int)id;
    b->x = v[0], b->y = v[1], b->w = v[2], b->h = v[3];
    b->left = b->x - b->w / 2, b->right = b->x + b->w / 2;
    b->top = b->y - b->h / 2, b->bottom = b->y + b->h / 2;
    if (b->left < -1e-4f || b->top < -1e-4f || b->right > 1 + 1e-4f || b->bottom > 1 + 1e-4f) {
        b->left = b->left < 0 ? 0 : b->left;
        b->top = b->top < 0 ? 0 : b->top;
        b->right = b->right > 1 ? 1 : b->right;
        b->bottom = b->bottom > 1 ? 1 : b->bottom;
        b->x = (b->left + b->right) / 2, b->y = (b->top + b->bottom) / 2;
        b->w = b->right - b->left, b->h = b->bottom - b->top;
        ++*clipped;
    }
    return 1;
}

/* ---- What the reader said ---- */

typedef struct said {
    const fz_run *run;
    int calls, last_line;
    int line[TEXT_MAX + 1]; /* the lines named, in order */
} said;

static void on_problem(void *ctx, int line, const char *what)
{
    said *s = ctx;
    size_t n = strnlen(what, 160), i;
    if (n == 0) fz_violation(s->run, "problem() with an empty message", what);
    if (n >= 160) fz_violation(s->run, "problem() with a message of 160 bytes or more", what);
    for (i = 0; i < n; ++i)
        if ((unsigned char)what[i] < 0x20 || (unsigned char)what[i] >= 0x7f)
            fz_violation(s->run, "problem() with a byte that is not printable ASCII", what);
    if (line <= s->last_line) fz_violation(s->run, "problem() lines not increasing from 1", what);
    s->last_line = line;
    if (s->calls <= TEXT_MAX) s->line[s->calls] = line;
    ++s->calls;
}

static int same_bits(float a, float b) { return !memcmp(&a, &b, sizeof a); }

/* Bit for bit; for a clipped box, x, y, w and h within 2^-22 (2 ulps at 1):
 * darknet is built with -Ofast, which may fold (y + h/2) - (y - h/2) to h. */
static int same_box(const box_label *a, const box_label *b, int clipped)
{
    const float tol = clipped ? 0x1p-22f : 0;
    return a->id == b->id && same_bits(a->left, b->left) && same_bits(a->right, b->right) &&
           same_bits(a->top, b->top) && same_bits(a->bottom, b->bottom) &&
           fabsf(a->x - b->x) <= tol && fabsf(a->y - b->y) <= tol &&
           fabsf(a->w - b->w) <= tol && fabsf(a->h - b->h) <= tol;
}

/* The reader's result against the harness's reading of text. */
static void check_read(const fz_run *run, const unsigned char *text, size_t len, int classes,
                       const label_read *out, const said *s)
{
    size_t at = 0;
    int line = 0, lines = 0, bad = 0, good = 0, clipped = 0;
    char detail[160];
    while (at < len) {
        const unsigned char *nl = memchr(text + at, '\n', len - at);
        size_t n = nl ? (size_t)(nl - (text + at)) : len - at;
        box_label b;
        int before = clipped;
        int r = ref_line((const char *)text + at, n, classes, &b, &clipped);
        ++line;
        at += n + (nl ? 1 : 0);
        if (r < 0) continue;
        ++lines;
        if (r == 0) {
            if (bad < s->calls && bad <= TEXT_MAX && s->line[bad] != line) {
                snprintf(detail, sizeof detail, "line %d named where line %d is the bad one",
                         s->line[bad], line);
                fz_violation(run, "problem() named the wrong line", detail);
            }
            ++bad;
            continue;
        }
        if (good >= out->n) fz_violation(run, "a good line is not a box", NULL);
        if (!same_box(&out->boxes[good], &b, clipped != before)) {
            snprintf(detail, sizeof detail, "box %d: %d %.9g %.9g %.9g %.9g, expected %d %.9g "
                     "%.9g %.9g %.9g", good, out->boxes[good].id, out->boxes[good].x,
                     out->boxes[good].y, out->boxes[good].w, out->boxes[good].h, b.id, b.x, b.y,
                     b.w, b.h);
            fz_violation(run, "a box is not the line's (bit for bit; clipped: x y w h within 2^-22)", detail);
        }
        ++good;
    }
    snprintf(detail, sizeof detail, "read lines %d skipped %d n %d clipped %d problems %d; "
             "expected %d %d %d %d %d", out->lines, out->skipped, out->n, out->clipped, s->calls,
             lines, bad, good, clipped, bad);
    if (out->lines != lines || out->skipped != bad || out->n != good || out->clipped != clipped ||
        s->calls != bad)
        fz_violation(run, "the counts are not the text's", detail);
    if ((out->n == 0) != (out->boxes == NULL))
        fz_violation(run, "boxes is NULL exactly when n is 0: not so", detail);
}

static void check_text(fz_run *run, input *in)
{
    /* exactly len bytes: a read past them is out of the block */
    unsigned char *text = malloc(in->buf.len ? in->buf.len : 1);
    said *s = calloc(1, sizeof *s);
    label_read out;
    if (!text || !s) abort();
    memcpy(text, in->buf.p, in->buf.len);
    s->run = run;
    if (labels_parse((const char *)text, in->buf.len + (plant ? 1 : 0), in->classes, on_problem,
                     s, &out))
        fz_violation(run, "labels_parse ran out of memory", NULL);
    check_read(run, text, in->buf.len, in->classes, &out, s);
    if (out.skipped) ++parse_count->n_no;
    else ++parse_count->n_yes;
    box_count->n_yes += (unsigned long)out.n;
    box_count->n_no += (unsigned long)out.skipped;
    if (in->kind == FILE_READ) {
        /* the file reader: the same as the text's, from the file */
        FILE *f = fopen(lpath, "wb");
        label_read fout;
        said *fs = calloc(1, sizeof *fs);
        char why[256];
        if (!f || !fs || fwrite(text, 1, in->buf.len, f) != in->buf.len || fclose(f))
            abort();
        fs->run = run;
        if (labels_read_file(lpath, in->classes, on_problem, fs, &fout, why, sizeof why))
            fz_violation(run, "labels_read_file refused a label file", why);
        check_read(run, text, in->buf.len, in->classes, &fout, fs);
        free(fout.boxes);
        free(fs);
        ++file_count->n_yes;
    }
    free(out.boxes);
    free(text);
    free(s);
}

/* ---- label_path ---- */

/* s with the first find made rep, when it is there and fits. */
static int ref_replace(char *s, const char *find, const char *rep)
{
    char *p = strstr(s, find), tmp[2 * LABEL_PATH_MAX];
    if (!p || strlen(s) - strlen(find) + strlen(rep) >= LABEL_PATH_MAX) return 0;
    snprintf(tmp, sizeof tmp, "%.*s%s%s", (int)(p - s), s, rep, p + strlen(find));
    strcpy(s, tmp);
    return 1;
}

static int ref_label_path(const char *img, int rule, char *out)
{
    const char *slash = strrchr(img, '/'), *base = slash ? slash + 1 : img;
    const char *dot = strrchr(base, '.');
    size_t i, stem;
    int image_ext = 0, replaced;
    if (!dot || dot == base) return 0;
    for (i = 0; i < COUNT(exts); ++i) image_ext |= !strcasecmp(dot + 1, exts[i]);
    stem = (size_t)(dot - img);
    if (!image_ext || stem + 4 >= LABEL_PATH_MAX) return 0;
    snprintf(out, 2 * LABEL_PATH_MAX, "%.*s.txt", (int)stem, img);
    if (rule == LABELS_BESIDE) return 1;
    replaced = ref_replace(out, "images", "labels");
    replaced |= ref_replace(out, "JPEGImages", "labels");
    replaced |= ref_replace(out, "raw", "labels");
    return replaced;
}

static void check_path(const fz_run *run, input *in)
{
    static char out[LABEL_PATH_MAX + FZ_GUARD], want[2 * LABEL_PATH_MAX];
    const char *img = fz_str(&in->buf);
    int rule, i;
    for (rule = LABELS_DIR; rule <= LABELS_BESIDE; ++rule) {
        int got, expect;
        memset(out, 'E', LABEL_PATH_MAX);
        memset(out + LABEL_PATH_MAX, FZ_GUARD_BYTE, FZ_GUARD);
        got = label_path(img, (label_rule)rule, out);
        expect = ref_label_path(img, rule, want);
        for (i = 0; i < FZ_GUARD; ++i)
            if ((unsigned char)out[LABEL_PATH_MAX + i] != FZ_GUARD_BYTE)
                fz_violation(run, "label_path wrote past LABEL_PATH_MAX", NULL);
        if (got != expect)
            fz_violation(run, rule == LABELS_DIR ? "label_path (labels folder): made or not made "
                                                   "against the rule"
                                                 : "label_path (beside): made or not made against "
                                                   "the rule", expect ? want : NULL);
        if (got && (!memchr(out, 0, LABEL_PATH_MAX) || strcmp(out, want)))
            fz_violation(run, "label_path made another path than the rule's", want);
        if (got) ++path_count->n_yes;
        else ++path_count->n_no;
    }
}

static void check(fz_run *run, input *in)
{
    if (in->kind == PATH) check_path(run, in);
    else check_text(run, in);
}

static void counters(fz_run *run)
{
    parse_count = fz_counter(run, "labels_parse (texts)", "all good", "with a bad line");
    box_count = fz_counter(run, "labels_parse (lines)", "boxes", "skipped");
    file_count = fz_counter(run, "labels_read_file", "read as the text", "refused");
    path_count = fz_counter(run, "label_path (both rules)", "made", "not made");
}

/* A missing label file and a folder: refused, with a reason. */
static void check_refusals(fz_run *run)
{
    char why[256], dir[4200];
    label_read out;
    snprintf(dir, sizeof dir, "%s/a-folder.txt", scratch);
    mkdir(dir, 0755);
    why[0] = 0;
    if (!labels_read_file(dir, 2, NULL, NULL, &out, why, sizeof why) || !why[0] || out.n)
        fz_violation(run, "labels_read_file took a folder", why);
    ++file_count->n_no;
    remove(lpath);
    why[0] = 0;
    if (!labels_read_file(lpath, 2, NULL, NULL, &out, why, sizeof why) || !why[0] || out.n)
        fz_violation(run, "labels_read_file took a missing file", why);
    ++file_count->n_no;
}

static void input_init(input *in) { fz_buf_init(&in->buf, TEXT_MAX); }

static void set_scratch(const char *dir)
{
    snprintf(scratch, sizeof scratch, "%s", dir);
    mkdir(scratch, 0755);
    snprintf(lpath, sizeof lpath, "%s/l.txt", scratch);
}

#ifndef FUZZ_LIBFUZZER
int main(int argc, char **argv)
{
    fz_run run;
    input in;
    if (argc < 2 || argc > 3 || (argc == 3 && strcmp(argv[2], "plant"))) {
        fprintf(stderr, "usage: labels_fuzz SCRATCH [plant]\n");
        return 2;
    }
    plant = argc == 3;
    set_scratch(argv[1]);
    input_init(&in);
    fz_begin(&run, plant ? "fuzz.labels.planted" : "fuzz.labels", DEFAULT_N, DEFAULT_SEED);
    counters(&run);
    run.print_input = print_input;
    run.ctx = &in;
    check_refusals(&run);
    for (run.index = 0; run.index < run.n; ++run.index) {
        fz_rng r = fz_rng_at(run.seed, run.index);
        make_input(&in, &r);
        if (plant) in.kind = TEXT; /* the planted read is in labels_parse */
        check(&run, &in);
    }
    fz_buf_free(&in.buf);
    return fz_end(&run);
}
#else
/* libFuzzer: byte 0 picks the kind (0-6 text, 7 a file, 8-9 a path, modulo
 * 10) and the class count (its high bits); the rest is the text or path. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const int class_counts[] = {0, 1, 2, 80, INT_MAX};
    static fz_run run;
    static input in;
    static int ready;
    unsigned pick;
    if (!ready) {
        const char *dir = getenv("DARKNET_AMP_FUZZ_DIR");
        char d[4096];
        snprintf(d, sizeof d, "%s/labels_libfuzzer", dir ? dir : "/tmp");
        set_scratch(d);
        input_init(&in);
        fz_begin(&run, "fuzz.labels (libFuzzer)", 0, 0);
        counters(&run);
        run.print_input = print_input;
        run.ctx = &in;
        ready = 1;
    }
    if (size < 1) return 0;
    pick = data[0] % 10;
    in.kind = pick < 7 ? TEXT : pick < 8 ? FILE_READ : PATH;
    in.classes = class_counts[(data[0] / 10) % COUNT(class_counts)];
    fz_buf_set(&in.buf, data + 1, size - 1);
    ++run.index;
    check(&run, &in);
    return 0;
}
#endif
