/* The plugin's message helpers (error.h). */
#include "core.h"

#include <stdarg.h>
#include <stdio.h>

int amp_errorf(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    if (!err || !errlen) return 0;
    va_start(ap, fmt);
    int n = vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return n;
}

void amp_net_fail(amp_net *an, amp_status status, const char *fmt, ...)
{
    if (!an || an->error[0]) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(an->error, sizeof an->error, fmt, ap);
    va_end(ap);
    an->error_status = status;
    fprintf(stderr, "%s\n", an->error);
}
