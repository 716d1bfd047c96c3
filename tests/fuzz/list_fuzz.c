/* fuzz.list: the readers of a training list: the fork's check of it
 * (data_check_open, darknet's src/data_check.c, patch 0029), and darknet's
 * get_paths and read_data_cfg, which read lists and .data files with fgetl
 * (src/utils.c, patch 0031).
 *
 * SCRATCH holds a small dataset made once: two good images with labels in
 * the labels folder, one with its label beside it, an empty image, one with
 * no label file, one whose only box is bad, one with a good and a bad box, a
 * folder named like an image and a file with no image extension. Each input
 * is a list of 0 to 12 lines, half of them good images' paths, the others
 * the rest of the dataset's, missing ones, blank lines, lines with \r,
 * spaces or tabs after the name, lines of 5000 bytes and a line with a NUL
 * byte, joined by \n or \r\n, with or without a last newline, mutated
 * (mutate.h) 2 times in 5. It is written to SCRATCH/list.txt and read with
 * a -bad_max of 0, 0.1, 0.5 or 1 (1 twice as often), said or quiet, with
 * and without the lists of bad files, stderr caught in a file.
 *
 * The contract (data_check.h, docs/training.md "When the data is bad"):
 * - the lines are those of the file (split at \n, the last one without a
 *   newline counted), each as the name up to a NUL byte, less the \r,
 *   spaces and tabs at its end; a line that is blank is not an image; where
 *   the list names no image the run is refused;
 * - an entry whose line is one of the dataset's paths as written is
 *   usable exactly when that image is good; any other entry is usable only
 *   when its file is there, a regular file, not empty and has a label file;
 *   a line with a NUL byte never is; a usable entry's labels read again;
 * - the run is refused exactly when no entry is usable, or the bad images
 *   are more than bad_max of the images, or (every line being known, so
 *   that the boxes are too) the bad boxes more than bad_max of the boxes;
 *   refused: a message in the buffer, NUL-terminated, starting with
 *   "fuzz.data: train=", nothing past the buffer;
 * - said (not quiet): every entry that is not usable is named once, as
 *   "LIST:LINE: NAME: why; image skipped", with its line from 1; every
 *   other line of stderr is a bad box ("FILE:LINE: why; box skipped"), a
 *   count of more ("FILE: N more bad lines skipped"), the list's count or
 *   the summary ("data: "); with the lists, BACKUP.bad_images.list holds
 *   the bad entries' names, in the list's order; quiet: not a byte said and
 *   no list written;
 * - get_paths: every line of the file, up to a NUL byte, newline taken off;
 *   read_data_cfg: as many options as lines that, stripped of spaces and
 *   tabs, are not empty, do not start with '#' or ';' and do not end in
 *   their first '=' (darknet's read_option takes a line with no '=' as a
 *   key with no value);
 * - nothing reads or writes out of bounds (the sanitized build).
 *
 *   list_fuzz SCRATCH               N and seed: DARKNET_AMP_FUZZ_N, DARKNET_AMP_FUZZ_SEED
 */
#include "fuzz.h"
#include "data_check.h"
#include "data.h"        /* get_paths */
#include "option_list.h" /* read_data_cfg */

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#define DEFAULT_N 10000
#define DEFAULT_SEED 20261208u
#define LIST_MAX 32768
#define MAX_LINES 4096
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* The dataset: a path under SCRATCH, its bytes, its label file and text,
 * whether it can be trained on, and its good and bad boxes. */
typedef struct entry {
    const char *path, *bytes, *label, *label_text;
    int good, boxes, bad_boxes;
} entry;

static const entry dataset[] = {
    {"images/a.jpg", "not decoded here", "labels/a.txt", "0 0.5 0.5 0.2 0.2\n", 1, 1, 0},
    {"images/b.PNG", "x", "labels/b.txt", "1 0.25 0.25 0.1 0.1\n0 0.7 0.7 0.2 0.2\n", 1, 2, 0},
    {"beside/c.jpeg", "x", "beside/c.txt", "0 0.5 0.5 0.5 0.5\n", 1, 1, 0},
    {"images/empty.jpg", "", "labels/empty.txt", "0 0.5 0.5 0.2 0.2\n", 0, 0, 0},
    {"images/nolabel.jpg", "x", NULL, NULL, 0, 0, 0},
    {"images/allbad.jpg", "x", "labels/allbad.txt", "0 nan 0.5 0.2 0.2\n", 0, 1, 1},
    {"images/somebad.jpg", "x", "labels/somebad.txt", "0 0.5 0.5 0.2 0.2\n5 0.5 0.5 0.2 0.2\n",
     1, 2, 1},
    {"images/folder.jpg", NULL, NULL, NULL, 0, 0, 0}, /* a folder */
    {"images/noext", "x", NULL, NULL, 0, 0, 0},
    {"images/missing.jpg", NULL, "labels/missing.txt", "0 0.5 0.5 0.2 0.2\n", 0, 0, 0},
};

static const char *const dict[] = {"\n", "\r\n", "\r", " ", "\t", "/", ".jpg", ".txt",
                                   "images", "labels", "\n\n", "#", "=", "train=", "\0"};

typedef struct input {
    fz_buf list;
    float bad_max;
    int quiet, lists;
} input;

static char scratch[4096], list_path[4200], err_path[4200], prefix[4200], bad_imgs[4300],
    bad_labels[4300];
static char full[COUNT(dataset)][4200];
static fz_count *open_count, *entry_count;

static void print_input(void *ctx, FILE *out)
{
    const input *in = ctx;
    fprintf(out, "-bad_max %g, %s, %s lists, %zu bytes: ", in->bad_max,
            in->quiet ? "quiet" : "said", in->lists ? "with" : "without", in->list.len);
    fz_print_escaped(out, in->list.p, in->list.len);
}

static void put_file(const char *rel, const char *bytes)
{
    char p[4200];
    FILE *f;
    snprintf(p, sizeof p, "%s/%s", scratch, rel);
    f = fopen(p, "wb");
    if (!f || fwrite(bytes, 1, strlen(bytes), f) != strlen(bytes) || fclose(f)) {
        fprintf(stderr, "list_fuzz: cannot write %s\n", p);
        exit(2);
    }
}

static void make_dataset(const char *dir)
{
    size_t i;
    char p[4200];
    snprintf(scratch, sizeof scratch, "%s", dir);
    mkdir(scratch, 0755);
    for (i = 0; i < 4; ++i) {
        static const char *const sub[] = {"images", "labels", "beside", "backup"};
        snprintf(p, sizeof p, "%s/%s", scratch, sub[i]);
        mkdir(p, 0755);
    }
    for (i = 0; i < COUNT(dataset); ++i) {
        const entry *e = &dataset[i];
        snprintf(full[i], sizeof full[i], "%s/%s", scratch, e->path);
        if (e->bytes) put_file(e->path, e->bytes);
        else if (!strcmp(e->path, "images/folder.jpg")) mkdir(full[i], 0755);
        if (e->label && strcmp(e->path, "images/missing.jpg")) put_file(e->label, e->label_text);
    }
    snprintf(list_path, sizeof list_path, "%s/list.txt", scratch);
    snprintf(err_path, sizeof err_path, "%s/stderr.txt", scratch);
    snprintf(prefix, sizeof prefix, "%s/backup/run", scratch);
    snprintf(bad_imgs, sizeof bad_imgs, "%s.bad_images.list", prefix);
    snprintf(bad_labels, sizeof bad_labels, "%s.bad_labels.list", prefix);
}

static void append(fz_buf *b, const void *s, size_t n)
{
    if (b->len + n > b->max) n = b->max - b->len;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void make_input(input *in, fz_rng *r)
{
    static const float maxes[] = {0, 0.1f, 0.5f, 1, 1};
    size_t k, nl = fz_below(r, 13);
    const char *eol = fz_chance(r, 25) ? "\r\n" : "\n";
    in->bad_max = maxes[fz_below(r, COUNT(maxes))];
    in->quiet = fz_chance(r, 20);
    in->lists = fz_chance(r, 75);
    in->list.len = 0;
    in->list.p[0] = 0;
    for (k = 0; k < nl; ++k) {
        static const size_t good[] = {0, 1, 2, 6};
        size_t pick = fz_chance(r, 50) ? good[fz_below(r, COUNT(good))]
                                       : fz_below(r, COUNT(dataset) + 4);
        if (pick < COUNT(dataset)) {
            append(&in->list, full[pick], strlen(full[pick]));
            if (fz_chance(r, 10)) append(&in->list, fz_chance(r, 50) ? " \t" : "\r", 1 + fz_below(r, 2));
        } else if (pick == COUNT(dataset)) {
            append(&in->list, "   ", fz_below(r, 4)); /* blank */
        } else if (pick == COUNT(dataset) + 1) {
            size_t n = 4990 + fz_below(r, 20), i;
            for (i = 0; i < n && in->list.len < in->list.max; ++i) append(&in->list, "d", 1);
        } else if (pick == COUNT(dataset) + 2) {
            append(&in->list, full[0], strlen(full[0]));
            append(&in->list, "\0tail", 5); /* a NUL byte in the name */
        } else {
            append(&in->list, "relative/images/x.jpg", 21);
        }
        if (k + 1 < nl || fz_chance(r, 70)) append(&in->list, eol, strlen(eol));
    }
    if (fz_chance(r, 40)) fz_mutate(&in->list, r, dict, COUNT(dict), 2);
}

/* ---- The list as the contract reads it ---- */

typedef struct line_view {
    const char *p; /* the name: up to a NUL, less \r, spaces and tabs at its end */
    size_t name_len, raw_len; /* raw: up to a NUL, newline off */
    int nul, known;           /* known: the index of the dataset entry it names, or -1 */
} line_view;

static int split_list(const input *in, line_view *v)
{
    size_t at = 0;
    int n = 0;
    while (at < in->list.len && n < MAX_LINES) {
        const char *s = (const char *)in->list.p + at;
        const char *nl = memchr(s, '\n', in->list.len - at);
        size_t len = nl ? (size_t)(nl - s) : in->list.len - at, name;
        size_t i;
        const char *z = memchr(s, 0, len);
        v[n].p = s;
        v[n].nul = z != NULL;
        name = z ? (size_t)(z - s) : len;
        v[n].raw_len = name;
        while (name && (s[name - 1] == '\r' || s[name - 1] == ' ' || s[name - 1] == '\t')) --name;
        v[n].name_len = name;
        v[n].known = -1;
        for (i = 0; i < COUNT(dataset) && !v[n].nul; ++i)
            if (strlen(full[i]) == name && !memcmp(full[i], s, name)) v[n].known = (int)i;
        at += len + (nl ? 1 : 0);
        ++n;
    }
    return n;
}

static int has_prefix(const char *s, const char *p) { return !strncmp(s, p, strlen(p)); }

static char *slurp(const char *p, size_t *n)
{
    FILE *f = fopen(p, "rb");
    char *b;
    long size;
    *n = 0;
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    size = ftell(f);
    rewind(f);
    b = malloc((size_t)size + 1);
    if (!b) abort();
    *n = fread(b, 1, (size_t)size, f);
    b[*n] = 0;
    fclose(f);
    return b;
}

/* The lines said: each of a kind the contract names, every bad entry once. */
static void check_said(const fz_run *run, const line_view *v, int m, data_check *c)
{
    size_t n, at = 0;
    char *text = slurp(err_path, &n), want[4300];
    unsigned char *named = calloc((size_t)m + 1, 1);
    int i, shown = 0;
    if (!named) abort();
    snprintf(want, sizeof want, "%s:", list_path);
    while (text && at < n) {
        char *line = text + at, *nl = memchr(line, '\n', n - at);
        if (!nl) fz_violation(run, "stderr ends without a newline", line);
        *nl = 0;
        at = (size_t)(nl - text) + 1;
        if (has_prefix(line, want) && strstr(line, "; image skipped")) {
            char *end;
            long k = strtol(line + strlen(want), &end, 10);
            if (*end != ':' || k < 1 || k > m) fz_violation(run, "an entry named without its line", line);
            if (named[k]) fz_violation(run, "an entry named twice", line);
            if (c && data_check_usable(c, (int)k - 1))
                fz_violation(run, "a usable entry named as skipped", line);
            named[k] = 1;
            ++shown;
        } else if (!(strstr(line, "; box skipped") || strstr(line, " more bad lines skipped") ||
                     has_prefix(line, "data: ") || (has_prefix(line, want) && strstr(line, " images")))) {
            fz_violation(run, "stderr holds a line of no kind the check says", line);
        }
    }
    if (c)
        for (i = 0; i < m; ++i)
            if ((v[i].name_len || v[i].nul) && !data_check_usable(c, i) && !named[i + 1])
                fz_violation(run, "a bad entry is not named", v[i].p);
    free(named);
    free(text);
    (void)shown;
}

/* BACKUP.bad_images.list: the bad entries' names, in order. */
static void check_bad_list(const fz_run *run, const line_view *v, int m, data_check *c)
{
    size_t n, at = 0;
    char *text = slurp(bad_imgs, &n);
    int i;
    for (i = 0; i < m; ++i) {
        size_t len;
        if (!(v[i].name_len || v[i].nul) || data_check_usable(c, i)) continue;
        len = v[i].name_len;
        if (!text || at + len + 1 > n || memcmp(text + at, v[i].p, len) || text[at + len] != '\n')
            fz_violation(run, "bad_images.list does not hold the bad entries in order", v[i].p);
        at += len + 1;
    }
    if (text && at != n) fz_violation(run, "bad_images.list holds more than the bad entries", text + at);
    free(text);
}

static data_check *open_caught(const input *in, char ***paths, int *m, fz_err *e, fz_rng *r)
{
    data_check_params p = {"fuzz.data", "train", list_path, 2, in->bad_max,
                           in->lists ? prefix : NULL, in->quiet};
    int saved, fd;
    data_check *c;
    char *err = fz_err_reset(e, r);
    fflush(stderr);
    saved = dup(2);
    fd = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (saved < 0 || fd < 0 || dup2(fd, 2) < 0) abort();
    c = data_check_open(&p, paths, m, err, e->len);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    close(fd);
    return c;
}

static void check(fz_run *run, fz_rng *r, input *in)
{
    static line_view v[MAX_LINES];
    static fz_err e;
    FILE *f;
    char **paths = NULL;
    int m = 0, n, i, images = 0, bad = 0, all_known = 1, boxes = 0, bad_boxes = 0, refuse;
    data_check *c;
    list *got;
    unlink(bad_imgs);
    unlink(bad_labels);
    f = fopen(list_path, "wb");
    if (!f || fwrite(in->list.p, 1, in->list.len, f) != in->list.len || fclose(f)) abort();
    n = split_list(in, v);
    if (n >= MAX_LINES) return;
    for (i = 0; i < n; ++i) {
        if (!v[i].name_len && !v[i].nul) continue;
        ++images;
        if (v[i].known >= 0) {
            const entry *d = &dataset[v[i].known];
            bad += !d->good;
            boxes += d->good || d->bad_boxes ? d->boxes : 0;
            bad_boxes += d->good || d->bad_boxes ? d->bad_boxes : 0;
        } else if (v[i].nul) {
            ++bad;
        } else {
            all_known = 0;
        }
    }
    c = open_caught(in, &paths, &m, &e, r);
    if (!c) {
        const char *why = fz_check_message(AMP_ERR_INVALID, &e, "fuzz.data: train=", 0);
        if (why) fz_violation(run, why, e.buf);
        ++open_count->n_no;
    }
    refuse = images == 0 || bad == images || bad > in->bad_max * images ||
             bad_boxes > in->bad_max * boxes;
    if (all_known && (c == NULL) != refuse)
        fz_violation(run, c ? "the run was not refused where the contract refuses it"
                            : "the run was refused where the contract lets it train", e.buf);
    if (images == 0 && c) fz_violation(run, "a list that names no image was taken", NULL);
    if (c) {
        ++open_count->n_yes;
        if (m != n) fz_violation(run, "data_check_open's lines are not the file's", NULL);
        for (i = 0; i < m; ++i) {
            int u = data_check_usable(c, i);
            if (strlen(paths[i]) != v[i].name_len || memcmp(paths[i], v[i].p, v[i].name_len))
                fz_violation(run, "an entry's name is not its line's", paths[i]);
            if (v[i].known >= 0 && u != dataset[v[i].known].good)
                fz_violation(run, u ? "a bad image of the dataset is usable"
                                    : "a good image of the dataset is not usable", paths[i]);
            if (v[i].nul && u) fz_violation(run, "a line with a NUL byte is usable", paths[i]);
            if (u) {
                label_read lr;
                struct stat st;
                if (stat(paths[i], &st) || !S_ISREG(st.st_mode) || st.st_size == 0)
                    fz_violation(run, "a usable entry's image is not a non-empty file", paths[i]);
                if (!data_check_labels(c, i, &lr) || (lr.n == 0 && lr.skipped))
                    fz_violation(run, "a usable entry's labels do not read again", paths[i]);
                free(lr.boxes);
                ++entry_count->n_yes;
            } else if (v[i].name_len || v[i].nul) {
                ++entry_count->n_no;
            }
        }
    }
    if (in->quiet) {
        struct stat st;
        if (stat(err_path, &st) == 0 && st.st_size)
            fz_violation(run, "a quiet check said something", NULL);
        if (stat(bad_imgs, &st) == 0 || stat(bad_labels, &st) == 0)
            fz_violation(run, "a quiet check wrote a list of bad files", NULL);
    } else {
        check_said(run, v, n, c);
        if (c && in->lists) check_bad_list(run, v, n, c);
    }
    data_check_free(c); /* frees paths too */
    /* darknet's own readers of the same file */
    got = get_paths(list_path);
    if (got->size != n) fz_violation(run, "get_paths: not the file's lines", NULL);
    {
        node *nd = got->front;
        for (i = 0; nd; nd = nd->next, ++i) {
            if (strlen((char *)nd->val) != v[i].raw_len || memcmp(nd->val, v[i].p, v[i].raw_len))
                fz_violation(run, "get_paths: a line is not the file's", (char *)nd->val);
        }
        free_list_contents(got);
        free_list(got);
    }
    {
        int saved = dup(2), fd = open("/dev/null", O_WRONLY), expect = 0;
        list *opts;
        node *nd;
        for (i = 0; i < n; ++i) {
            char s[8192];
            size_t k, o = 0;
            for (k = 0; k < v[i].raw_len && o + 1 < sizeof s; ++k)
                if (v[i].p[k] != ' ' && v[i].p[k] != '\t' && v[i].p[k] != '\n')
                    s[o++] = v[i].p[k];
            s[o] = 0;
            /* read_option takes a line with no '=' as a key without a
             * value, and refuses one whose first '=' is its last byte */
            expect += s[0] && s[0] != '#' && s[0] != ';' &&
                      !(strchr(s, '=') && strchr(s, '=') == s + o - 1);
        }
        fflush(stderr);
        dup2(fd, 2);
        opts = read_data_cfg(list_path);
        fflush(stderr);
        dup2(saved, 2);
        close(saved);
        close(fd);
        if (opts->size != expect) fz_violation(run, "read_data_cfg: not the file's options", NULL);
        for (nd = opts->front; nd; nd = nd->next) {
            kvp *o = nd->val;
            free(o->key); /* the line; the value points into it */
            free(o);
        }
        free_list(opts);
    }
}

static void counters(fz_run *run)
{
    open_count = fz_counter(run, "data_check_open", "trained", "refused");
    entry_count = fz_counter(run, "data_check_open (entries)", "usable", "skipped");
}

#ifndef FUZZ_LIBFUZZER
int main(int argc, char **argv)
{
    fz_run run;
    input in;
    if (argc != 2) {
        fprintf(stderr, "usage: list_fuzz SCRATCH\n");
        return 2;
    }
    make_dataset(argv[1]);
    fz_buf_init(&in.list, LIST_MAX);
    fz_begin(&run, "fuzz.list", DEFAULT_N, DEFAULT_SEED);
    counters(&run);
    run.print_input = print_input;
    run.ctx = &in;
    for (run.index = 0; run.index < run.n; ++run.index) {
        fz_rng r = fz_rng_at(run.seed, run.index);
        make_input(&in, &r);
        check(&run, &r, &in);
    }
    fz_buf_free(&in.list);
    return fz_end(&run);
}
#else
/* libFuzzer: byte 0 picks -bad_max (bits 0-1), quiet (bit 2) and the lists
 * (bit 3); the rest is the list. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const float maxes[] = {0, 0.1f, 0.5f, 1};
    static fz_run run;
    static input in;
    static int ready;
    fz_rng r;
    if (!ready) {
        const char *dir = getenv("DARKNET_AMP_FUZZ_DIR");
        char d[4096];
        snprintf(d, sizeof d, "%s/list_libfuzzer", dir ? dir : "/tmp");
        make_dataset(d);
        fz_buf_init(&in.list, LIST_MAX);
        fz_begin(&run, "fuzz.list (libFuzzer)", 0, 0);
        counters(&run);
        run.print_input = print_input;
        run.ctx = &in;
        ready = 1;
    }
    if (size < 1) return 0;
    r.s = data[0];
    in.bad_max = maxes[data[0] & 3];
    in.quiet = (data[0] >> 2) & 1;
    in.lists = (data[0] >> 3) & 1;
    fz_buf_set(&in.list, data + 1, size - 1);
    ++run.index;
    check(&run, &r, &in);
    return 0;
}
#endif
