/* Linked into the fork's `darknet` program only: registers the AMP hooks
 * before main() runs, so that a cfg with [net] amp=1 trains with AMP and
 * every cfg's AMP keys are validated. Libraries stay explicit (amp_register). */
#include "cli.h" /* amp_cli_program */
#include "dist.h"

#include <stdio.h>
#include <stdlib.h>

__attribute__((constructor)) static void register_amp(void)
{
    amp_program_set(&amp_cli_program); /* the program's options, commands, record */
    if (amp_register() != AMP_OK)
        fprintf(stderr, "amp: warning: another plugin's hooks are registered; AMP is off\n");
    /* A data-parallel launch: MPI up (and the seed shared) before darknet
     * reads DARKNET_SEED; a launch that cannot run is refused here. */
    const amp_comm *c = NULL;
    char err[AMP_MSG_LEN];
    if (amp_dist_get(&c, err, sizeof err) != AMP_OK) {
        fprintf(stderr, "%s\n", err);
        exit(EXIT_FAILURE);
    }
}
