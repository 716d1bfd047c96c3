/* The oneDNN half path's entry points in a build without oneDNN: no layer
 * installs there (the CPU backend then emulates), and nothing to free. The
 * real ones are onednn_layer.c and onednn_mem.c, built instead of this file when
 * CMake finds oneDNN.
 */
#include "cpu.h"

amp_status amp_onednn_install(amp_layer *al, layer *l, amp_dtype dtype, char *why,
                              size_t whylen)
{
    (void)al, (void)l, (void)dtype;
    AMP_RETURN_ERROR(AMP_ERR_INVALID, why, whylen, "built without oneDNN");
}
void amp_onednn_free(cpu_layer *c) { (void)c; }
int amp_onednn_fallbacks(const cpu_layer *c)
{
    (void)c;
    return 0;
}
void amp_onednn_ctx_free(cpu_net *cn) { (void)cn; }
int amp_onednn_form(const cpu_layer *c, double *t_direct, double *t_matmul)
{
    (void)c;
    *t_direct = *t_matmul = -1;
    return -1;
}
const char *amp_onednn_isa(int *native_bf16)
{
    *native_bf16 = 0;
    return "none";
}
int amp_onednn_plan_io(cpu_layer *c, amp_dtype in, amp_dtype out)
{
    (void)c, (void)in, (void)out;
    return 0;
}
amp_status amp_onednn_plan_forward(layer l, network net)
{
    (void)l, (void)net;
    return AMP_ERR_INVALID;
}
amp_status amp_onednn_plan_backward(layer l, network net)
{
    (void)l, (void)net;
    return AMP_ERR_INVALID;
}
int amp_onednn_plan_ran(const cpu_layer *c)
{
    (void)c;
    return 0;
}
int amp_onednn_rounds_input_in_place(const cpu_layer *c)
{
    (void)c;
    return 0;
}
