/* A network's first failure in its training step (error.h's amp_net_fail):
 * kept in the network's record, which is why it is not in error.c, below
 * core.h. */
#include "core.h"

#include <stdarg.h>
#include <stdio.h>

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
