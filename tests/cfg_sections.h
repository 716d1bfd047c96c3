/* What read_cfg returns, for the C tests that read cfg files themselves
 * (unit.options, fuzz.options): parser.c's private section type and the
 * list's release. */
#ifndef DARKNET_AMP_TEST_CFG_SECTIONS_H
#define DARKNET_AMP_TEST_CFG_SECTIONS_H

#include "darknet.h"
#include "list.h"
#include "option_list.h"

#include <stdlib.h>

/* parser.c's private section type, which read_cfg's list holds. */
typedef struct cfg_section {
    char *type;
    list *options;
} cfg_section;

/* Frees read_cfg's list: every option line, every section. */
static inline void test_free_sections(list *sections)
{
    node *n;
    for (n = sections->front; n; n = n->next) {
        cfg_section *s = (cfg_section *)n->val;
        node *o;
        for (o = s->options->front; o; o = o->next) {
            kvp *p = (kvp *)o->val;
            free(p->key); /* the line; val points into it */
            free(p);
        }
        free_list(s->options);
        free(s->type);
        free(s);
    }
    free_list(sections);
}

#endif
