/* A small deterministic mutation engine for the fuzz harnesses: a seeded
 * PRNG and mutators over a byte buffer. Header only, no state outside the
 * caller's structs: the same seed gives the same inputs on every machine
 * (the PRNG is integer arithmetic alone, no rand(), no time).
 *
 *   fz_rng r = fz_rng_at(seed, i);       input i's own stream: any input can
 *                                        be made again from (seed, i) alone
 *   fz_buf b; fz_buf_init(&b, 4096);     at most 4096 bytes, NUL-terminated
 *   fz_buf_set_str(&b, "amp_dtype");
 *   fz_mutate(&b, &r, dict, ndict, 3);   1 to 3 random mutations
 *
 * Mutators: flip a bit; set a byte to an interesting value (0, 0xff, 0x7f,
 * 0x80, and a few ASCII ones); insert random bytes; delete, duplicate or
 * repeat a run; splice in a token of the caller's dictionary; truncate;
 * extend (to thousands of bytes). A buffer keeps a NUL after its last byte,
 * so b.p reads as a C string too (cut at an inner 0 byte, as a reader of
 * C strings would see it).
 */
#ifndef DARKNET_AMP_FUZZ_MUTATE_H
#define DARKNET_AMP_FUZZ_MUTATE_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- PRNG: splitmix64 (Steele, Lea, Flood 2014) ---- */

typedef struct fz_rng {
    uint64_t s;
} fz_rng;

static inline uint64_t fz_next(fz_rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The stream of input i under seed: independent of every other input's, so
 * that a failure names (seed, i) and nothing else. */
static inline fz_rng fz_rng_at(uint64_t seed, uint64_t i)
{
    fz_rng r = {seed ^ (i * 0xd1b54a32d192ed03ull)};
    fz_next(&r);
    return r;
}

/* Uniform in [0, n); 0 when n is 0. The modulo's bias (n / 2^64) is
 * irrelevant for the small n used here. */
static inline size_t fz_below(fz_rng *r, size_t n)
{
    return n ? (size_t)(fz_next(r) % n) : 0;
}

/* 1 with probability pct percent. */
static inline int fz_chance(fz_rng *r, unsigned pct)
{
    return fz_below(r, 100) < pct;
}

/* ---- Buffers ---- */

typedef struct fz_buf {
    unsigned char *p; /* len bytes, then a NUL */
    size_t len, max;  /* max: the most bytes a mutation may leave */
} fz_buf;

/* Exits on out of memory: a harness cannot go on without its buffer. */
static inline void fz_buf_init(fz_buf *b, size_t max)
{
    b->p = (unsigned char *)calloc(max + 1, 1);
    if (!b->p) abort();
    b->len = 0;
    b->max = max;
}

static inline void fz_buf_free(fz_buf *b)
{
    free(b->p);
    b->p = NULL;
    b->len = b->max = 0;
}

static inline void fz_buf_set(fz_buf *b, const void *data, size_t n)
{
    if (n > b->max) n = b->max;
    memcpy(b->p, data, n);
    b->len = n;
    b->p[n] = '\0';
}

static inline void fz_buf_set_str(fz_buf *b, const char *s)
{
    fz_buf_set(b, s, strlen(s));
}

static inline const char *fz_str(const fz_buf *b)
{
    return (const char *)b->p;
}

/* Opens a gap of n bytes at pos (n already fits). */
static inline void fz_gap(fz_buf *b, size_t pos, size_t n)
{
    memmove(b->p + pos + n, b->p + pos, b->len - pos);
    b->len += n;
    b->p[b->len] = '\0';
}

static inline void fz_cut(fz_buf *b, size_t pos, size_t n)
{
    memmove(b->p + pos, b->p + pos + n, b->len - pos - n);
    b->len -= n;
    b->p[b->len] = '\0';
}

/* ---- Mutators: each leaves len <= max and the NUL after the last byte ---- */

static inline void fz_flip_bit(fz_buf *b, fz_rng *r)
{
    if (!b->len) return;
    b->p[fz_below(r, b->len)] ^= (unsigned char)(1u << fz_below(r, 8));
}

/* Bytes that break parsers: NUL, the ends of signed and unsigned char, and
 * ASCII that means something to the readers here (separators, signs,
 * digits, spaces, a control character). */
static const unsigned char fz_interesting[] = {0x00, 0xff, 0x7f, 0x80, 0x01, '\n', '\r', '\t', ' ',
                                               '=',  ':',  ';',  ',',  '-',  '+',  '.',  '0',  '9',
                                               'e',  'x',  '[',  '#'};

static inline void fz_set_interesting(fz_buf *b, fz_rng *r)
{
    if (!b->len) return;
    b->p[fz_below(r, b->len)] = fz_interesting[fz_below(r, sizeof fz_interesting)];
}

static inline void fz_insert_random(fz_buf *b, fz_rng *r)
{
    size_t n = 1 + fz_below(r, 8), pos = fz_below(r, b->len + 1), i;
    if (b->len + n > b->max) n = b->max - b->len;
    fz_gap(b, pos, n);
    for (i = 0; i < n; ++i)
        b->p[pos + i] = fz_chance(r, 50) ? (unsigned char)fz_below(r, 256)
                                         : (unsigned char)(' ' + fz_below(r, 95));
}

static inline void fz_delete_run(fz_buf *b, fz_rng *r)
{
    size_t pos, n;
    if (!b->len) return;
    pos = fz_below(r, b->len);
    n = 1 + fz_below(r, b->len - pos < 16 ? b->len - pos : 16);
    fz_cut(b, pos, n);
}

/* Copies a run of the buffer to another place (also makes duplicates of
 * whole fields, keys or items when the run covers one). */
static inline void fz_duplicate_run(fz_buf *b, fz_rng *r)
{
    size_t from, n, to;
    if (!b->len) return;
    from = fz_below(r, b->len);
    n = 1 + fz_below(r, b->len - from);
    if (b->len + n > b->max) n = b->max - b->len;
    to = fz_below(r, b->len + 1);
    if (to > from && to < from + n) to = from + n; /* not inside the run itself */
    fz_gap(b, to, n);
    /* the run moved by n if the gap opened before it */
    memmove(b->p + to, b->p + from + (to <= from ? n : 0), n);
}

static inline void fz_splice_token(fz_buf *b, fz_rng *r, const char *const *dict, size_t ndict)
{
    const char *t;
    size_t n, pos;
    if (!ndict) return;
    t = dict[fz_below(r, ndict)];
    n = strlen(t);
    pos = fz_below(r, b->len + 1);
    if (fz_chance(r, 40) && b->len) {
        /* overwrite rather than insert: a token replacing a token */
        size_t over = fz_below(r, b->len - pos + 1);
        fz_cut(b, pos, over);
    }
    if (b->len + n > b->max) n = b->max - b->len;
    fz_gap(b, pos, n);
    memcpy(b->p + pos, t, n);
}

static inline void fz_truncate(fz_buf *b, fz_rng *r)
{
    b->len = fz_below(r, b->len + 1);
    b->p[b->len] = '\0';
}

/* Appends hundreds to thousands of bytes: one byte repeated, or the buffer's
 * own tail over and over (long numbers, long names, many separators). */
static inline void fz_extend(fz_buf *b, fz_rng *r)
{
    size_t n = 64 + fz_below(r, 4096), i, tail = b->len ? 1 + fz_below(r, b->len) : 0;
    size_t start = b->len - tail;
    unsigned char c = fz_chance(r, 50) ? (unsigned char)('0' + fz_below(r, 10))
                                       : fz_interesting[fz_below(r, sizeof fz_interesting)];
    if (b->len + n > b->max) n = b->max - b->len;
    for (i = 0; i < n; ++i)
        b->p[b->len + i] = tail && fz_chance(r, 50) ? b->p[start + i % tail] : c;
    b->len += n;
    b->p[b->len] = '\0';
}

/* 1 to rounds mutations, each picked at random (extend the rarest: it makes
 * the slowest inputs). */
static inline void fz_mutate(fz_buf *b, fz_rng *r, const char *const *dict, size_t ndict,
                             unsigned rounds)
{
    unsigned k, n = 1 + (unsigned)fz_below(r, rounds ? rounds : 1);
    for (k = 0; k < n; ++k) {
        switch (fz_below(r, 15)) {
        case 0: case 1: fz_flip_bit(b, r); break;
        case 2: case 3: fz_set_interesting(b, r); break;
        case 4: case 5: fz_insert_random(b, r); break;
        case 6: case 7: fz_delete_run(b, r); break;
        case 8: fz_duplicate_run(b, r); break;
        case 9: case 10: case 11: fz_splice_token(b, r, dict, ndict); break;
        case 12: case 13: fz_truncate(b, r); break;
        default: fz_extend(b, r); break;
        }
    }
}

#endif
