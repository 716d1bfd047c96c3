/* Linked into the fork's `darknet` program only: registers the AMP hooks
 * before main() runs, so that a cfg with [net] amp=1 trains with AMP and
 * every cfg's AMP keys are validated. Libraries stay explicit (amp_register). */
#include "darknet_amp.h"

#include <stdio.h>

__attribute__((constructor)) static void register_amp(void)
{
    if (amp_register() != AMP_OK)
        fprintf(stderr, "amp: warning: another plugin's hooks are registered; AMP is off\n");
}
