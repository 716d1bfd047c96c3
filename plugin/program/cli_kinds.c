/* `darknet-amp amp kinds`: the layer kinds darknet-amp knows (kinds.c) and,
 * for each backend of this build, whether it has a half form for the kind in
 * float16 and bfloat16 (its supports): which of a cfg's layers can run in
 * half here, before training. */
#include "cli.h"
#include "backend.h"

#include <stdio.h>

static const char *role_name(amp_kind_role r)
{
    switch (r) {
    case AMP_ROLE_GEMM: return "GEMM in half";
    case AMP_ROLE_RECURRENT: return "GEMMs in sub-layers";
    case AMP_ROLE_NORMALISES: return "float32 statistics";
    case AMP_ROLE_MOVES: return "moves half tensors";
    }
    return "?";
}

int amp_cli_kinds(int argc, char **argv, int *status)
{
    (void)argc, (void)argv;
    const amp_backend_ops *b[4];
    const int nb = amp_backends(b, 4);
    const amp_dtype dt[2] = {AMP_DTYPE_FLOAT16, AMP_DTYPE_BFLOAT16};
    printf("The layer kinds darknet-amp knows, and the half forms of this build's backends\n"
           "(yes: the kind runs in half there; docs/architecture.md):\n\n");
    printf("  %-16s %-20s", "kind", "role");
    for (int j = 0; j < nb; ++j) printf("  %-5s %-9s %-9s", b[j]->name, "float16", "bfloat16");
    printf("\n");
    for (int i = 0; i < amp_kind_count(); ++i) {
        const amp_layer_kind *k = amp_kind_at(i);
        printf("  %-16s %-20s", k->name, role_name(k->role));
        for (int j = 0; j < nb; ++j)
            printf("  %-5s %-9s %-9s", "", b[j]->supports(k, dt[0]) ? "yes" : "-",
                   b[j]->supports(k, dt[1]) ? "yes" : "-");
        printf("\n");
    }
    printf("\nOther layer types (the losses, softmax, crop, ...) run in float32, as darknet\n"
           "runs them. A layer of a supported kind can still be float32: amp=0 in its\n"
           "section, or a shape the backend refuses (the start-up table says which).\n");
    *status = 0;
    return 1;
}
