/* The fork's plugin hooks (patches/0004-plugin-hooks.patch): each callback is
 * called at its point with the right arguments, a layer's own keys read by a
 * hook are not reported as unused, a rejecting hook makes
 * parse_network_cfg_checked() return NULL with the message, and nothing is
 * called once the hooks are removed.
 *
 *   plugin_hooks_test CFG WORKDIR    (CFG: any small darknet cfg)
 */
#include "darknet.h"

#include <stdio.h>
#include "check.h"
#include <stdlib.h>
#include <string.h>

typedef struct {
    int net_options, layer_options, parsed, saved, loaded, freed;
    int last_index, marked_layers, reject_at; /* reject_at: layer index, -2 = [net], -1 = none */
    network *net;
    char file[512];
} counts;



static int on_net(void *ctx, network *net, list *options, const char *cfg, char *err, size_t n)
{
    counts *c = ctx;
    (void)options;
    c->net_options++;
    c->net = net;
    if (c->reject_at == -2) {
        snprintf(err, n, "%s: [net] rejected by the test hook", cfg);
        return 1;
    }
    return 0;
}

static int on_layer(void *ctx, network *net, int index, const char *type, list *options,
                    const char *cfg, char *err, size_t n)
{
    counts *c = ctx;
    (void)net, (void)type;
    c->layer_options++;
    c->last_index = index;
    /* test_mark=1 is this test's own key, read as the AMP plugin reads amp=0. */
    if (option_find_int_quiet(options, "test_mark", 0)) c->marked_layers++;
    if (index == c->reject_at) {
        snprintf(err, n, "%s: layer %d rejected by the test hook", cfg, index);
        return 1;
    }
    return 0;
}

static int on_parsed(void *ctx, network *net, const char *cfg, char *err, size_t n)
{
    counts *c = ctx;
    (void)cfg, (void)err, (void)n;
    c->parsed++;
    net->hook_data = c;
    return 0;
}

static void on_saved(void *ctx, network *net, const char *file)
{
    counts *c = ctx;
    c->saved += net->hook_data == c;
    snprintf(c->file, sizeof c->file, "%s", file);
}

static int on_loaded(void *ctx, network *net, const char *file, char *err, size_t n)
{
    counts *c = ctx;
    (void)err, (void)n;
    c->loaded += net->hook_data == c;
    snprintf(c->file, sizeof c->file, "%s", file);
    return 0;
}

static void on_freed(void *ctx, network *net)
{
    counts *c = ctx;
    c->freed += net->hook_data == c;
}

/* Writes CFG with test_mark=1 added to its first two layer sections. */
static int marked_copy(const char *cfg, const char *out)
{
    FILE *in = fopen(cfg, "r"), *o = fopen(out, "w");
    char line[1024];
    int sections = 0;
    if (!in || !o) return -1;
    while (fgets(line, sizeof line, in)) {
        fputs(line, o);
        if (line[0] == '[' && ++sections >= 2 && sections <= 3) fputs("test_mark=1\n", o);
    }
    fclose(in);
    return fclose(o);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: plugin_hooks_test CFG WORKDIR\n");
        return 2;
    }
    char cfg[1024], weights[1024], err[256] = {0};
    snprintf(cfg, sizeof cfg, "%s/marked.cfg", argv[2]);
    snprintf(weights, sizeof weights, "%s/hooks_test.weights", argv[2]);
    if (marked_copy(argv[1], cfg)) {
        fprintf(stderr, "plugin_hooks_test: cannot write %s\n", cfg);
        return 1;
    }
    gpu_index = -1;

    counts c = {0};
    c.reject_at = -1;
    darknet_hooks hooks = {&c, on_net, on_layer, on_parsed, on_saved, on_loaded, on_freed};
    CHECK(darknet_set_hooks(&hooks) == NULL, "no hooks registered at start");
    CHECK(darknet_get_hooks() == &hooks, "darknet_get_hooks returns the registered table");

    network *net = parse_network_cfg_checked(cfg, err, sizeof err);
    CHECK(net != NULL, "cfg parsed with hooks (%s)", err);
    if (!net) return 1;
    CHECK(c.net_options == 1 && c.net == net, "net_options called once, with the network");
    CHECK(c.layer_options == net->n && c.last_index == net->n - 1,
          "layer_options called for each of %d layers (got %d, last index %d)", net->n,
          c.layer_options, c.last_index);
    CHECK(c.marked_layers == 2, "a hook read its own key in 2 layers (got %d)", c.marked_layers);
    CHECK(c.parsed == 1 && net->hook_data == &c, "network_parsed called once, set hook_data");

    save_weights(net, weights);
    CHECK(c.saved == 1 && !strcmp(c.file, weights), "weights_saved called with %s", c.file);
    c.file[0] = 0;
    load_weights(net, weights);
    CHECK(c.loaded == 1 && !strcmp(c.file, weights), "weights_loaded called with %s", c.file);
    free_network(net);
    CHECK(c.freed == 1, "network_freed called before the network was freed");

    counts r = {0};
    r.reject_at = 3;
    hooks.ctx = &r;
    err[0] = 0;
    net = parse_network_cfg_checked(cfg, err, sizeof err);
    CHECK(net == NULL && strstr(err, "layer 3 rejected"),
          "a layer hook's refusal is returned: \"%s\"", err);
    CHECK(r.parsed == 0 && r.layer_options == 4,
          "parsing stopped at the refused layer (%d layers seen)", r.layer_options);
    r.reject_at = -2;
    err[0] = 0;
    net = parse_network_cfg_checked(cfg, err, sizeof err);
    CHECK(net == NULL && strstr(err, "[net] rejected"),
          "a [net] hook's refusal is returned: \"%s\"", err);

    CHECK(darknet_set_hooks(NULL) == &hooks, "removing the hooks returns the old table");
    counts none = {0};
    hooks.ctx = &none;
    net = parse_network_cfg_checked(cfg, err, sizeof err);
    save_weights(net, weights);
    free_network(net);
    CHECK(none.net_options + none.layer_options + none.parsed + none.saved + none.freed == 0,
          "no callback runs after the hooks are removed");
    free_network(NULL);
    CHECK(1, "free_network(NULL) is accepted");

    return check_report();
}
