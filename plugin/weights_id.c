/* The weights a state file belongs to (state_file.h): a weights file's
 * identity (darknet's seen, its size and CRC-32), read in one pass that also
 * counts its float32 values and the non-finite ones among them (the
 * progress line's warning, amp show). */
#include "state_file.h"
#include "core.h" /* amp_errorf */
#include "math/grad_math.h" /* amp_nonfinite_bits */

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

int amp_weights_same(const amp_weights_id *a, const amp_weights_id *b)
{
    return a->bound && b->bound && a->seen == b->seen && a->size == b->size && a->crc == b->crc;
}

void amp_weights_describe(const amp_weights_id *id, char *out, size_t size)
{
    if (!id->bound)
        snprintf(out, size, "no weights");
    else
        snprintf(out, size, "seen %llu, %llu bytes, CRC-32 0x%08lx", id->seen, id->size, id->crc);
}

/* The float32 values after darknet's header, counted as the file streams
 * past (any split of it into reads). */
typedef struct value_count {
    unsigned long long values, nonfinite, first;
    unsigned char part[4];
    size_t npart;
} value_count;

static void count_value(value_count *c, const unsigned char *p)
{
    float x;
    memcpy(&x, p, sizeof x);
    if (amp_nonfinite_bits(x) && !c->nonfinite++) c->first = c->values; /* grad_math.h */
    c->values += 1;
}

static void count_values(value_count *c, const unsigned char *p, size_t n)
{
    while (n && c->npart) {
        c->part[c->npart++] = *p++, --n;
        if (c->npart == 4) count_value(c, c->part), c->npart = 0;
    }
    for (; n >= 4; p += 4, n -= 4) count_value(c, p);
    while (n) c->part[c->npart++] = *p++, --n;
}

/* Reads up to n bytes (fewer only at the end of the file); -1 on an error. */
static ssize_t read_full(int fd, unsigned char *p, size_t n)
{
    size_t got = 0;
    while (got < n) {
        const ssize_t r = read(fd, p + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        if (r == 0) break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

amp_status amp_weights_identify(const char *weights, amp_weights_id *id, char *err, size_t errlen)
{
    amp_weights_values v;
    return amp_weights_read(weights, id, &v, err, errlen);
}

amp_status amp_weights_read(const char *weights, amp_weights_id *id, amp_weights_values *v,
                            char *err, size_t errlen)
{
    static const size_t chunk = 1 << 20;
    memset(id, 0, sizeof *id);
    memset(v, 0, sizeof *v);
    if (err && errlen) err[0] = '\0';
    int fd = open(weights, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) return AMP_OK;
        AMP_RETURN_ERROR(AMP_ERR_IO, err, errlen, "weights file %s: cannot open: %s", weights,
                         strerror(errno));
    }
    unsigned char *buf = malloc(chunk);
    if (!buf) {
        close(fd);
        AMP_RETURN_ERROR(AMP_ERR_NOMEM, err, errlen, "weights file %s: out of memory", weights);
    }
    /* darknet's header: major, minor, revision as ints, then seen as a size_t
     * from version 0.2 on (an int before), in the host's byte order; the
     * layers' float32 arrays after it. */
    int head[3] = {0, 0, 0};
    unsigned char first[3 * sizeof(int) + sizeof(size_t)] = {0};
    const ssize_t nfirst = read_full(fd, first, sizeof first);
    uLong crc = crc32(0L, Z_NULL, 0);
    unsigned long long size = nfirst > 0 ? (unsigned long long)nfirst : 0;
    value_count values;
    memset(&values, 0, sizeof values);
    int failed = nfirst < 0;
    if (nfirst > 0) crc = crc32(crc, first, (uInt)nfirst);
    memcpy(head, first, sizeof head);
    /* darknet's test, in a width where any header's major*10 cannot overflow */
    const int long_seen =
        (long long)head[0] * 10 + head[1] >= 2 && head[0] < 1000 && head[1] < 1000;
    const size_t need = sizeof head + (long_seen ? sizeof(size_t) : sizeof(int));
    if (nfirst > (ssize_t)need) count_values(&values, first + need, (size_t)nfirst - need);
    while (!failed && nfirst == (ssize_t)sizeof first) {
        const ssize_t r = read_full(fd, buf, chunk);
        if (r < 0) failed = 1;
        if (r <= 0) break;
        crc = crc32(crc, buf, (uInt)r);
        size += (unsigned long long)r;
        count_values(&values, buf, (size_t)r);
    }
    const int e = errno;
    free(buf);
    close(fd);
    AMP_RETURN_ERROR_IF(failed, AMP_ERR_IO, err, errlen, "weights file %s: cannot read: %s",
                        weights, strerror(e));
    AMP_RETURN_ERROR_IF((size_t)nfirst < need, AMP_ERR_FORMAT, err, errlen,
                        "weights file %s: %llu bytes, shorter than darknet's %zu-byte header",
                        weights, size, need);
    if (long_seen) {
        size_t seen;
        memcpy(&seen, first + sizeof head, sizeof seen);
        id->seen = seen;
    } else {
        int seen;
        memcpy(&seen, first + sizeof head, sizeof seen);
        id->seen = (unsigned long long)(unsigned)seen;
    }
    id->bound = 1;
    id->size = size;
    id->crc = (unsigned long)crc;
    v->values = values.values;
    v->nonfinite = values.nonfinite;
    v->first_nonfinite = values.first;
    return AMP_OK;
}
