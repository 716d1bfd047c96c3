/* The CPU backend's environment (docs/cfg.md): DARKNET_AMP_CPU (which path
 * half layers get) and DARKNET_AMP_CONV (how a convolution goes through
 * oneDNN), read and checked at every attach; DARKNET_AMP_MAX_CPU_ISA, which
 * isa.c reads once per process, checked here too, so that a bad value is
 * refused at attach. The core's own variables are in plugin/options.c.
 */
#include "cpu.h"

#include <stdlib.h>
#include <string.h>

void amp_cpu_env_read(amp_cpu_env *env)
{
    env->cpu = getenv("DARKNET_AMP_CPU");
    env->conv = getenv("DARKNET_AMP_CONV");
}

/* value (unset and "" mean names[0]) as its index in names, or a message
 * naming the variable and the values it takes. */
static amp_status parse_choice(const char *var, const char *value, const char *const names[3],
                               int *out, char *err, size_t errlen)
{
    if (!value || !*value) value = names[0];
    for (int i = 0; i < 3; ++i)
        if (!strcmp(value, names[i])) {
            *out = i;
            return AMP_OK;
        }
    char shown[256]; /* any bytes, any length: escaped and cut */
    AMP_RETURN_ERROR(AMP_ERR_INVALID, err, errlen, "%s=%s: expected %s, %s or %s", var,
                     amp_show(shown, sizeof shown, value, 64), names[0], names[1], names[2]);
}

amp_status amp_cpu_path_parse(const char *value, amp_cpu_path *out, char *err, size_t errlen)
{
    static const char *const names[3] = {"auto", "onednn", "emulate"}; /* amp_cpu_path's order */
    int i = 0;
    AMP_FORWARD_IF_ERROR(parse_choice("DARKNET_AMP_CPU", value, names, &i, err, errlen));
    *out = (amp_cpu_path)i;
    return AMP_OK;
}

amp_status amp_conv_form_parse(const char *value, amp_conv_form *out, char *err, size_t errlen)
{
    static const char *const names[3] = {"auto", "direct", "matmul"}; /* amp_conv_form's order */
    int i = 0;
    AMP_FORWARD_IF_ERROR(parse_choice("DARKNET_AMP_CONV", value, names, &i, err, errlen));
    *out = (amp_conv_form)i;
    return AMP_OK;
}

amp_status amp_cpu_settings(cpu_net *cn, char *err, size_t errlen)
{
    amp_cpu_env env;
    amp_cpu_env_read(&env);
    AMP_FORWARD_IF_ERROR(amp_cpu_path_parse(env.cpu, &cn->path, err, errlen));
    AMP_FORWARD_IF_ERROR(amp_conv_form_parse(env.conv, &cn->conv_form, err, errlen));
    amp_cpu_isa cap; /* isa.c reads it once for the process; refused here, with a message */
    AMP_FORWARD_IF_ERROR(amp_cpu_isa_parse(getenv("DARKNET_AMP_MAX_CPU_ISA"), &cap, err, errlen));
    (void)amp_cpu_isa_used(); /* decided now, before the layers' threads run */
    return AMP_OK;
}
