/* For the kill-and-resume test: one line per weights file, what a resume
 * would find there.
 *
 *   state_check CFG WEIGHTS...
 *
 * "FILE whole|refused seen=N state=match|other-weights|none|refused": whole
 * when CFG's network loads the file with load_weights_checked (patch 0011),
 * seen from its header; the state file <FILE>.amp read and compared with the
 * file's identity (seen, size, CRC-32). Exit status 0; the caller judges.
 */
#include "darknet.h"
#include "state_file.h"

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: state_check CFG WEIGHTS...\n");
        return 2;
    }
    gpu_index = -1;
    network *net = parse_network_cfg(argv[1]);
    for (int i = 2; i < argc; ++i) {
        char err[1024];
        const int whole = load_weights_checked(net, argv[i], 0, net->n, err, sizeof err) == 0;
        amp_weights_id id, saved;
        amp_dtype dtype;
        amp_scale_state st;
        int found = 0;
        const char *state = "refused";
        if (amp_weights_identify(argv[i], &id, err, sizeof err) == AMP_OK &&
            amp_state_file_read(argv[i], &dtype, &st, &saved, NULL, &found, err, sizeof err) == AMP_OK)
            state = !found ? "none" : amp_weights_same(&saved, &id) ? "match" : "other-weights";
        printf("%s %s seen=%llu state=%s%s%s\n", argv[i], whole ? "whole" : "refused", id.seen,
               state, strcmp(state, "refused") ? "" : " ", strcmp(state, "refused") ? "" : err);
    }
    free_network(net);
    return 0;
}
