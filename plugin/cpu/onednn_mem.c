/* The oneDNN half path's plumbing: the network's engine and stream, the CPU
 * as oneDNN sees it, memories (views of darknet's arrays, oneDNN-owned
 * storage, aliases where two layouts agree), reorders, and running a
 * primitive on the stream.
 */
#include "onednn.h"

#include <stdlib.h>

amp_status amp_dnnl_check(dnnl_status_t st, const char *call, char *why, size_t whylen)
{
    AMP_RETURN_ERROR_IF(st != dnnl_success, AMP_ERR_DEVICE, why, whylen,
                        "%s failed (oneDNN status %d)", call, (int)st);
    return AMP_OK;
}

amp_status amp_dnnl_ctx_of(cpu_net *cn, struct amp_dnnl_ctx **out, char *why, size_t whylen)
{
    if (!cn->dnnl) {
        struct amp_dnnl_ctx *c = calloc(1, sizeof *c);
        AMP_RETURN_ERROR_IF(!c, AMP_ERR_NOMEM, why, whylen, "out of memory");
        if (dnnl_engine_create(&c->engine, dnnl_cpu, 0) != dnnl_success ||
            dnnl_stream_create(&c->stream, c->engine, dnnl_stream_default_flags) != dnnl_success) {
            if (c->engine) dnnl_engine_destroy(c->engine);
            free(c);
            AMP_RETURN_ERROR(AMP_ERR_DEVICE, why, whylen, "no oneDNN CPU engine");
        }
        cn->dnnl = c;
    }
    *out = cn->dnnl;
    return AMP_OK;
}

void amp_onednn_ctx_free(cpu_net *cn)
{
    if (!cn || !cn->dnnl) return;
    dnnl_stream_destroy(cn->dnnl->stream);
    dnnl_engine_destroy(cn->dnnl->engine);
    free(cn->dnnl);
    cn->dnnl = NULL;
}

const char *amp_onednn_isa(int *native_bf16)
{
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    *native_bf16 = (isa & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16;
    switch (isa) {
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_sse41: return "sse41";
    default: return "other";
    }
}

static void prim_free(dnnl_primitive_t *p)
{
    if (*p) dnnl_primitive_destroy(*p);
    *p = NULL;
}

static void mem_free(dmem *m, const dmem *const *aliases, int naliases)
{
    if (!m->m) return;
    for (int i = 0; i < naliases; ++i)
        if (aliases[i] != m && aliases[i]->m == m->m) { /* not the owner */
            m->m = NULL;
            return;
        }
    dnnl_memory_destroy(m->m);
    m->m = NULL;
}

void amp_dnnl_release(amp_dnnl_conv *d)
{
    dnnl_primitive_t *prims[] = {&d->fwd, &d->bwd_data, &d->bwd_weights, &d->r_x, &d->r_y,
                                 &d->r_w_fwd, &d->r_w_bwd, &d->r_dy_bw, &d->r_dy_bd, &d->r_x_bw,
                                 &d->r_dw, &d->r_dx, &d->mm.r_dxh};
    for (size_t i = 0; i < sizeof prims / sizeof prims[0]; ++i) prim_free(prims[i]);
    for (int t = 0; t < AMP_T_COUNT; ++t) {
        amp_dnnl_image *im = &d->image[t];
        prim_free(&im->r);
        if (im->img.m) dnnl_memory_destroy(im->img.m);
        if (im->part.m) dnnl_memory_destroy(im->part.m);
        *im = (amp_dnnl_image){0};
    }
    /* aliases point at an owner earlier in this list: free from the end (the
     * matmul form's views are memories of their own, without storage) */
    dmem *mems[] = {&d->x_user, &d->y_user, &d->w_user, &d->dy_user, &d->dw_user, &d->dx_user,
                    &d->x, &d->y, &d->w_fwd, &d->dy_bw, &d->dw, &d->dx,
                    &d->w_bwd, &d->dy_bd, &d->x_bw,
                    &d->mm.col, &d->mm.dcol, &d->mm.dxa, &d->mm.dxh, &d->mm.w_t, &d->mm.w_nk,
                    &d->mm.y4, &d->mm.dy_t, &d->mm.dy_pn, &d->mm.dw4};
    const int n = (int)(sizeof mems / sizeof mems[0]);
    for (int i = n - 1; i >= 0; --i) mem_free(mems[i], (const dmem *const *)mems, i);
    d->batch = 0;
    d->matmul = 0;
    d->nslots = 0;
    for (int g = 0; g < AMP_DNNL_GROUPS; ++g) d->group_bytes[g] = 0;
}

/* A view of a darknet array (no storage), or oneDNN-owned storage. */
amp_status amp_dnnl_mem_view(dmem *m, const dnnl_memory_desc_t *md, dnnl_engine_t e, char *why,
                             size_t whylen)
{
    m->md = *md;
    return AMP_DNNL_CHECK(dnnl_memory_create(&m->m, md, e, DNNL_MEMORY_NONE));
}

static size_t align64(size_t n)
{
    return (n + 63) & ~(size_t)63;
}

/* Which passes use m: the forward's output only the forward; the input, the
 * weights and the matmul form's windows both; the data gradient's memories
 * (and the weights in backward-data's layout) a backward that makes it; the
 * other gradients every backward. */
static int group_of(const amp_dnnl_conv *d, const dmem *m)
{
    if (m == &d->y) return AMP_DNNL_FORWARD;
    if (m == &d->x || m == &d->mm.col || m == &d->w_fwd) return AMP_DNNL_BOTH;
    if (m == &d->dx || m == &d->dy_bd || m == &d->w_bwd || m == &d->mm.dcol ||
        m == &d->mm.dxa || m == &d->mm.dxh)
        return AMP_DNNL_DATA_GRAD;
    return AMP_DNNL_BACKWARD;
}

/* Where a group starts in d's share, and the share's size, for a forward
 * (data_grad 0) or a backward with or without the data gradient. */
static size_t group_base(const amp_dnnl_conv *d, int group)
{
    if (group == AMP_DNNL_BOTH) return 0;
    const size_t both = align64(d->group_bytes[AMP_DNNL_BOTH]);
    return group == AMP_DNNL_DATA_GRAD ? both + align64(d->group_bytes[AMP_DNNL_BACKWARD]) : both;
}

static size_t share_bytes(const amp_dnnl_conv *d, int data_grad)
{
    const size_t f = d->group_bytes[AMP_DNNL_FORWARD];
    const size_t b = data_grad ? align64(d->group_bytes[AMP_DNNL_BACKWARD]) +
                                     d->group_bytes[AMP_DNNL_DATA_GRAD]
                               : d->group_bytes[AMP_DNNL_BACKWARD];
    return align64(d->group_bytes[AMP_DNNL_BOTH]) + (f > b ? f : b);
}

/* A slot of d's arena share for m: at the next 64-byte boundary of its
 * group's part, or on owner; or (user) on darknet's side's storage. */
static amp_status add_slot(amp_dnnl_conv *d, dmem *m, const dmem *owner, int user, char *why,
                           size_t whylen)
{
    AMP_RETURN_ERROR_IF(d->nslots == AMP_DNNL_SLOTS, AMP_ERR_INVALID, why, whylen,
                        "more than %d arena memories", AMP_DNNL_SLOTS);
    amp_dnnl_slot *s = &d->slot[d->nslots++];
    s->mem = (size_t)((const char *)m - (const char *)d);
    s->owner = owner ? (long)((const char *)owner - (const char *)d) : -1;
    s->group = user ? AMP_DNNL_USER : group_of(d, m);
    s->offset = 0;
    if (!owner && !user) {
        s->offset = align64(d->group_bytes[s->group]);
        d->group_bytes[s->group] = s->offset + dnnl_memory_desc_get_size(&m->md);
    }
    return AMP_OK;
}

amp_status amp_dnnl_mem_own(dmem *m, const dnnl_memory_desc_t *md, amp_dnnl_conv *arena,
                            dnnl_engine_t e, char *why, size_t whylen)
{
    m->md = *md;
    AMP_FORWARD_IF_ERROR(AMP_DNNL_CHECK(
        dnnl_memory_create(&m->m, md, e, arena ? DNNL_MEMORY_NONE : DNNL_MEMORY_ALLOCATE)));
    return arena ? add_slot(arena, m, NULL, 0, why, whylen) : AMP_OK;
}

static dmem *slot_mem(amp_dnnl_conv *d, size_t off)
{
    return (dmem *)((char *)d + off);
}

/* m has a slot: in the arena, or on darknet's side's storage (views on it
 * follow it in either case). */
static int has_slot(const amp_dnnl_conv *d, const dmem *m)
{
    for (int i = 0; i < d->nslots; ++i)
        if ((const char *)d + d->slot[i].mem == (const char *)m) return 1;
    return 0;
}

amp_status amp_dnnl_bind(amp_layer *al, amp_dnnl_conv *d, int data_grad)
{
    cpu_net *cn = cpu_net_of(al->owner);
    if (amp_cpu_grow_mapped(&cn->arena, &cn->arena_bytes, share_bytes(d, data_grad)))
        return AMP_ERR_NOMEM;
    for (int i = 0; i < d->nslots; ++i) { /* owners come before their views */
        const amp_dnnl_slot *s = &d->slot[i];
        if (s->group == AMP_DNNL_USER) continue; /* amp_dnnl_bind_user's */
        if (s->group == AMP_DNNL_DATA_GRAD && !data_grad) continue;
        void *p = s->owner >= 0 ? amp_dnnl_data_of(slot_mem(d, (size_t)s->owner))
                                : (char *)cn->arena + group_base(d, s->group) + s->offset;
        if (dnnl_memory_set_data_handle(slot_mem(d, s->mem)->m, p) != dnnl_success)
            return AMP_ERR_DEVICE;
    }
    return AMP_OK;
}

amp_status amp_dnnl_mem_user(amp_dnnl_conv *d, dmem *m, const dnnl_memory_desc_t *md,
                             dnnl_engine_t e, char *why, size_t whylen)
{
    AMP_FORWARD_IF_ERROR(amp_dnnl_mem_view(m, md, e, why, whylen));
    return add_slot(d, m, NULL, 1, why, whylen);
}

amp_status amp_dnnl_mem_user_or_own(amp_dnnl_conv *d, dmem *m, const dnnl_memory_desc_t *md,
                                    const dmem *user, dnnl_engine_t e, char *why, size_t whylen)
{
    if (!dnnl_memory_desc_equal(&user->md, md)) return amp_dnnl_mem_own(m, md, d, e, why, whylen);
    return amp_dnnl_mem_user(d, m, md, e, why, whylen);
}

int amp_dnnl_is_user(const amp_dnnl_conv *d, const dmem *m)
{
    for (int i = 0; i < d->nslots; ++i)
        if ((const char *)d + d->slot[i].mem == (const char *)m)
            return d->slot[i].group == AMP_DNNL_USER;
    return 0;
}

amp_status amp_dnnl_bind_user(amp_dnnl_conv *d, dmem *m, void *p)
{
    const long at = (long)((const char *)m - (const char *)d);
    if (dnnl_memory_set_data_handle(m->m, p) != dnnl_success) return AMP_ERR_DEVICE;
    for (int i = 0; i < d->nslots; ++i)
        if (d->slot[i].owner == at &&
            dnnl_memory_set_data_handle(slot_mem(d, d->slot[i].mem)->m, p) != dnnl_success)
            return AMP_ERR_DEVICE;
    return AMP_OK;
}

/* dst takes src's storage when their layouts agree (no reorder needed), or
 * storage of its own. */
amp_status amp_dnnl_mem_alias_or_own(dmem *dst, const dmem *src, const dnnl_memory_desc_t *md,
                                     amp_dnnl_conv *arena, dnnl_engine_t e, char *why,
                                     size_t whylen)
{
    if (dnnl_memory_desc_equal(&src->md, md)) {
        dst->md = *md;
        dst->m = src->m;
        return AMP_OK;
    }
    return amp_dnnl_mem_own(dst, md, arena, e, why, whylen);
}

const_dnnl_primitive_attr_t amp_dnnl_attr(void)
{
    static dnnl_primitive_attr_t attr; /* made once, at the first attach; never freed */
    if (!attr && dnnl_primitive_attr_create(&attr) == dnnl_success &&
        dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) != dnnl_success) {
        dnnl_primitive_attr_destroy(attr);
        attr = NULL;
    }
    return attr;
}

/* A reorder from src to dst, adding into dst (sum post-op) when add. */
amp_status amp_dnnl_reorder(dnnl_primitive_t *out, const dmem *src, const dmem *dst, int add,
                            dnnl_engine_t e, char *why, size_t whylen)
{
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t ops = NULL;
    dnnl_primitive_desc_t pd = NULL;
    AMP_FORWARD_IF_ERROR(AMP_DNNL_CHECK(dnnl_primitive_attr_create(&attr)));
    amp_status sa =
        AMP_DNNL_CHECK(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user));
    if (sa == AMP_OK && add) {
        sa = AMP_DNNL_CHECK(dnnl_post_ops_create(&ops));
        if (sa == AMP_OK) sa = AMP_DNNL_CHECK(dnnl_post_ops_append_sum(ops, 1.0f));
        if (sa == AMP_OK) sa = AMP_DNNL_CHECK(dnnl_primitive_attr_set_post_ops(attr, ops));
        if (ops) dnnl_post_ops_destroy(ops);
    }
    if (sa != AMP_OK) {
        dnnl_primitive_attr_destroy(attr);
        return sa;
    }
    dnnl_status_t st = dnnl_reorder_primitive_desc_create(&pd, &src->md, e, &dst->md, e, attr);
    if (attr) dnnl_primitive_attr_destroy(attr);
    AMP_RETURN_ERROR_IF(st != dnnl_success, AMP_ERR_DEVICE, why, whylen,
                        "no oneDNN reorder%s (status %d)", add ? " with sum" : "", (int)st);
    st = dnnl_primitive_create(out, pd);
    dnnl_primitive_desc_destroy(pd);
    AMP_RETURN_ERROR_IF(st != dnnl_success, AMP_ERR_DEVICE, why, whylen,
                        "oneDNN reorder creation failed (status %d)", (int)st);
    return AMP_OK;
}

const char *amp_dnnl_impl_name(const_dnnl_primitive_desc_t pd)
{
    const char *s = "?";
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &s) != dnnl_success) s = "?";
    return s;
}

void amp_dnnl_md_any(dnnl_memory_desc_t *md, int ndims, const dnnl_dims_t dims, dnnl_data_type_t dt)
{
    dnnl_memory_desc_init_by_tag(md, ndims, dims, dt, dnnl_format_tag_any);
}

void *amp_dnnl_data_of(const dmem *m)
{
    void *p = NULL;
    return dnnl_memory_get_data_handle(m->m, &p) == dnnl_success ? p : NULL;
}

/* oneDNN-owned storage of dims and tag. */
amp_status amp_dnnl_mem_tag(dmem *m, int nd, const dnnl_dims_t dims, dnnl_data_type_t dt,
                            dnnl_format_tag_t tag, amp_dnnl_conv *arena, dnnl_engine_t e,
                            char *why, size_t whylen)
{
    dnnl_memory_desc_t md;
    AMP_FORWARD_IF_ERROR(AMP_DNNL_CHECK(dnnl_memory_desc_init_by_tag(&md, nd, dims, dt, tag)));
    return amp_dnnl_mem_own(m, &md, arena, e, why, whylen);
}

/* m: owner's storage seen as md (an owner in the arena: bound with it). */
amp_status amp_dnnl_mem_view_on(amp_dnnl_conv *d, dmem *m, const dnnl_memory_desc_t *md,
                                const dmem *owner, dnnl_engine_t e, char *why, size_t whylen)
{
    AMP_FORWARD_IF_ERROR(amp_dnnl_mem_view(m, md, e, why, whylen));
    if (has_slot(d, owner)) return add_slot(d, m, owner, 0, why, whylen);
    return AMP_DNNL_CHECK(dnnl_memory_set_data_handle(m->m, amp_dnnl_data_of(owner)));
}

/* m: owner's storage as a rows x cols matrix, row-major or, transposed, the
 * owner's cols x rows matrix read by columns. */
amp_status amp_dnnl_mem_matrix_on(amp_dnnl_conv *d, dmem *m, dnnl_dim_t rows, dnnl_dim_t cols,
                                  int transposed, const dmem *owner, dnnl_engine_t e, char *why,
                                  size_t whylen)
{
    const dnnl_dims_t dims = {rows, cols};
    const dnnl_dims_t strides = {transposed ? 1 : cols, transposed ? rows : 1};
    dnnl_memory_desc_t md;
    AMP_FORWARD_IF_ERROR(AMP_DNNL_CHECK(
        dnnl_memory_desc_init_by_strides(&md, 2, dims, owner->md.data_type, strides)));
    return amp_dnnl_mem_view_on(d, m, &md, owner, e, why, whylen);
}

/* Runs one primitive. A failure is not expected once the primitive exists;
 * the caller redoes a forward in the emulation, and stops training on a
 * backward left half done. */
amp_status amp_dnnl_run(amp_layer *al, dnnl_primitive_t p, int nargs, const dnnl_exec_arg_t *args)
{
    cpu_net *cn = cpu_net_of(al->owner);
    const struct amp_dnnl_ctx *c = cn->dnnl;
    /* its scratchpad, in the buffer every primitive shares */
    const_dnnl_primitive_desc_t pd = NULL;
    const dnnl_memory_desc_t *smd = NULL;
    if (dnnl_primitive_get_primitive_desc(p, &pd) == dnnl_success)
        smd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    const size_t bytes = smd ? dnnl_memory_desc_get_size(smd) : 0;
    dnnl_exec_arg_t a[8];
    dnnl_memory_t sm = NULL;
    if (bytes && nargs < 8) {
        if (amp_cpu_grow_mapped(&cn->scratchpad, &cn->scratchpad_bytes, bytes))
            return AMP_ERR_NOMEM;
        if (dnnl_memory_create(&sm, smd, c->engine, cn->scratchpad) != dnnl_success)
            return AMP_ERR_DEVICE;
        for (int i = 0; i < nargs; ++i) a[i] = args[i];
        a[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, sm};
        args = a;
    }
    dnnl_status_t st = dnnl_primitive_execute(p, c->stream, nargs, args);
    if (st == dnnl_success) st = dnnl_stream_wait(c->stream);
    if (sm) dnnl_memory_destroy(sm);
    return st == dnnl_success ? AMP_OK : AMP_ERR_DEVICE;
}

amp_status amp_dnnl_run_reorder(amp_layer *al, dnnl_primitive_t p, const dmem *src, const dmem *dst)
{
    dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, src->m}, {DNNL_ARG_TO, dst->m}};
    return amp_dnnl_run(al, p, 2, a);
}

void amp_dnnl_set(dmem *m, void *p) { dnnl_memory_set_data_handle(m->m, p); }

dnnl_data_type_t amp_dnnl_user_type(const amp_dnnl_conv *d, int out)
{
    const dnnl_data_type_t t = out ? d->user_out : d->user_in;
    return t == dnnl_data_type_undef ? dnnl_f32 : t;
}

dnnl_format_tag_t amp_dnnl_user_tag(const amp_dnnl_conv *d, int out)
{
    return amp_dnnl_user_type(d, out) == dnnl_f32 ? dnnl_nchw : dnnl_nhwc;
}

/* The float32 images one transfer moves at a time: as many as fit in this
 * many bytes (and divide the batch), at least one. Fewer, larger reorders
 * cost less per value, but the staging buffer is float32 beside half
 * tensors: at 8 MiB it was a third of the embedded detector's workspaces on
 * the AVX2 path, and 2 MiB ran as fast (yolov3-tiny at 160 px and the
 * embedded detector, batch 8, AVX2, paired runs: 0.97x and 1.01x the time). */
#define AMP_DNNL_IMAGES_BYTES ((size_t)2 << 20)

/* k images of a layout whose images are its outermost dimension (every
 * activation layout oneDNN picks: nchw, nhwc, nChw8c, nChw16c, nc): md with
 * batch k. 0 where the images are not laid out one after another. */
static int some_images(const dnnl_memory_desc_t *md, dnnl_dim_t k, dnnl_memory_desc_t *part)
{
    if (md->format_kind != dnnl_blocked || md->ndims < 2) return 0;
    const dnnl_blocking_desc_t *bd = &md->format_desc.blocking;
    for (int i = 0; i < bd->inner_nblks; ++i)
        if (bd->inner_idxs[i] == 0) return 0;
    for (int i = 1; i < md->ndims; ++i)
        if (bd->strides[i] > bd->strides[0]) return 0;
    *part = *md;
    part->dims[0] = part->padded_dims[0] = k;
    return 1;
}

amp_status amp_dnnl_images_build(amp_dnnl_conv *d, dnnl_engine_t e, const dnnl_memory_desc_t *ux,
                                 const dnnl_memory_desc_t *uy,
                                 const dmem *const internal[AMP_T_COUNT], char *why, size_t whylen)
{
    if (d->dt != dnnl_f32) return AMP_OK; /* half kernels: oneDNN's reorders are its fast ones */
    for (int t = 0; t < AMP_T_COUNT; ++t) {
        const int out = t == AMP_T_Y || t == AMP_T_DY_BW || t == AMP_T_DY_BD;
        const dnnl_memory_desc_t *u = out ? uy : ux;
        if (!internal[t] || !internal[t]->m || u->data_type == dnnl_f32) continue;
        const dnnl_dim_t batch = u->dims[0];
        const size_t per = (size_t)dnnl_memory_desc_get_size(u) / (size_t)batch * 2; /* f32 */
        dnnl_dim_t k = batch;
        while (k > 1 && ((size_t)k * per > AMP_DNNL_IMAGES_BYTES || batch % k)) --k;
        dnnl_memory_desc_t part, img;
        if (!some_images(&internal[t]->md, k, &part)) continue;
        /* the plan's layout, in float32 */
        AMP_FORWARD_IF_ERROR(AMP_DNNL_CHECK(dnnl_memory_desc_init_by_tag(
            &img, u->ndims, (dnnl_dims_t){k, u->dims[1], u->dims[2], u->dims[3]}, dnnl_f32,
            u->ndims == 2 ? dnnl_nc : dnnl_nhwc)));
        amp_dnnl_image *im = &d->image[t];
        AMP_FORWARD_IF_ERROR(amp_dnnl_mem_view(&im->img, &img, e, why, whylen));
        AMP_FORWARD_IF_ERROR(amp_dnnl_mem_view(&im->part, &part, e, why, whylen));
        const int to_internal = t != AMP_T_Y && t != AMP_T_DX;
        AMP_FORWARD_IF_ERROR(amp_dnnl_reorder(&im->r, to_internal ? &im->img : &im->part,
                                              to_internal ? &im->part : &im->img, 0, e, why,
                                              whylen));
        im->images = (int)k;
        im->part_bytes = dnnl_memory_desc_get_size(&part);
        im->elems = dnnl_memory_desc_get_size(&img) / sizeof(float);
    }
    return AMP_OK;
}
