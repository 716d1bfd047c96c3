/* The plugin's message helpers (error.h). */
#include "error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int amp_errorf(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    if (!err || !errlen) return 0;
    va_start(ap, fmt);
    int n = vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return n;
}

const char *amp_show(char *out, size_t size, const char *s, size_t max)
{
    size_t n = 0;
    if (!out || !size) return "";
    if (!s) s = "";
    /* room left for one "\xNN" escape, "..." and the NUL */
    for (; *s && n < max && n + 8 < size; ++s) {
        unsigned char c = (unsigned char)*s;
        if (c >= 0x20 && c < 0x7f)
            out[n++] = (char)c;
        else
            n += (size_t)snprintf(out + n, size - n, "\\x%02x", c);
    }
    if (*s && n + 4 <= size) {
        memcpy(out + n, "...", 3);
        n += 3;
    }
    out[n] = '\0';
    return out;
}
