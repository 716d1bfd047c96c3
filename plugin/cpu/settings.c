/* The CPU backend's environment (docs/cfg.md): DARKNET_AMP_CPU (which path
 * half layers get) and DARKNET_AMP_CONV (how a convolution goes through
 * oneDNN; its default depends on whether DARKNET_SEED is set), read and
 * checked at every attach; DARKNET_AMP_MAX_CPU_ISA, which
 * isa.c reads once per process, checked here too, so that a bad value is
 * refused at attach. The core's own variables are in plugin/options.c.
 */
#include "cpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void amp_cpu_env_read(amp_cpu_env *env)
{
    env->cpu = getenv("DARKNET_AMP_CPU");
    env->conv = getenv("DARKNET_AMP_CONV");
    const char *seed = getenv("DARKNET_SEED");
    env->seeded = seed && *seed;
}

/* value (unset and "" mean names[0]) as its index in the n names, or a
 * message naming the variable and the values it takes. */
static amp_status parse_choice(const char *var, const char *value, const char *const *names,
                               int n, int *out, char *err, size_t errlen)
{
    if (!value || !*value) value = names[0];
    for (int i = 0; i < n; ++i)
        if (!strcmp(value, names[i])) {
            *out = i;
            return AMP_OK;
        }
    char shown[256], values[128] = ""; /* any bytes, any length: escaped and cut */
    for (int i = 0; i < n; ++i)
        snprintf(values + strlen(values), sizeof values - strlen(values), "%s%s",
                 i == 0 ? "" : i == n - 1 ? " or " : ", ", names[i]);
    AMP_RETURN_ERROR(AMP_ERR_INVALID, err, errlen, "%s=%s: expected %s", var,
                     amp_show(shown, sizeof shown, value, 64), values);
}

amp_status amp_cpu_path_parse(const char *value, amp_cpu_path *out, char *err, size_t errlen)
{
    static const char *const names[3] = {"auto", "onednn", "emulate"}; /* amp_cpu_path's order */
    int i = 0;
    AMP_FORWARD_IF_ERROR(parse_choice("DARKNET_AMP_CPU", value, names, 3, &i, err, errlen));
    *out = (amp_cpu_path)i;
    return AMP_OK;
}

amp_status amp_conv_form_parse(const char *value, int seeded, amp_conv_form *out, char *err,
                               size_t errlen)
{
    /* "auto" first (the default), then amp_conv_form's order from TIMED */
    static const char *const names[5] = {"auto", "timed", "direct", "matmul", "rule"};
    int i = 0;
    AMP_FORWARD_IF_ERROR(parse_choice("DARKNET_AMP_CONV", value, names, 5, &i, err, errlen));
    *out = i == 0 ? (seeded ? AMP_CONV_RULE : AMP_CONV_TIMED) : (amp_conv_form)(i - 1);
    return AMP_OK;
}

amp_status amp_cpu_settings(cpu_net *cn, char *err, size_t errlen)
{
    amp_cpu_env env;
    amp_cpu_env_read(&env);
    AMP_FORWARD_IF_ERROR(amp_cpu_path_parse(env.cpu, &cn->path, err, errlen));
    AMP_FORWARD_IF_ERROR(amp_conv_form_parse(env.conv, env.seeded, &cn->conv_form, err, errlen));
    amp_cpu_isa cap; /* isa.c reads it once for the process; refused here, with a message */
    AMP_FORWARD_IF_ERROR(amp_cpu_isa_parse(getenv("DARKNET_AMP_MAX_CPU_ISA"), &cap, err, errlen));
    (void)amp_cpu_isa_used(); /* decided now, before the layers' threads run */
    return AMP_OK;
}
