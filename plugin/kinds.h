/* The table of layer kinds (kinds.c; docs/architecture.md, "Layer kinds"):
 * one row for each darknet layer type AMP knows. */
#ifndef AMP_KINDS_H
#define AMP_KINDS_H

#include "darknet.h"

#include <stddef.h>

/* What the policy and the plan make of a type. */
typedef enum amp_kind_role {
    AMP_ROLE_GEMM,       /* its convolution or GEMM runs in half (the policy) */
    AMP_ROLE_RECURRENT,  /* its GEMMs run in its sub-layers, which are GEMM kinds */
    AMP_ROLE_NORMALISES, /* float32, with batch-norm statistics a skip restores */
    AMP_ROLE_MOVES       /* moves data: a backend's half form carries half tensors through */
} amp_kind_role;
typedef struct amp_layer_kind {
    LAYER_TYPE type;
    const char *name;    /* the cfg section's name ("upsample", which darknet's
                            get_layer_string does not know) */
    amp_kind_role role;
    /* the parameter arrays darknet's update consumes (NULL: none) */
    void (*params)(const layer *l, size_t *weights, size_t *biases, size_t *scales);
    /* the channels of the rolling statistics its training forward updates (NULL or 0: none) */
    size_t (*statistics)(const layer *l);
    /* a recurrent kind's sub-layers in darknet's update order, with their names */
    int (*subs)(const layer *l, layer **subs, const char **names);
    /* multiply-adds of one forward pass (NULL: not counted) */
    double (*macs)(const layer *l);
} amp_layer_kind;
/* The row of a type, or NULL: darknet runs it unchanged, in float32. */
const amp_layer_kind *amp_kind_of(LAYER_TYPE type);
int amp_kind_count(void);
const amp_layer_kind *amp_kind_at(int i);
/* Multiply-adds of l's forward pass (a backward's passes are the same size); 0 when not counted. */
double amp_kind_macs(const layer *l);
/* Whether data-movement layer l has a shape the activation plan's half forms
 * carry on NHWC tensors, as darknet computes it: maxpool; route of inputs of
 * one spatial shape; upsample (not reverse, scale 1); shortcut of one shape,
 * alpha = beta = 1; reorg (darknet's permutation, not flatten or extra);
 * global avgpool; dropout; an activation whose gradient is a function of its
 * output. A backend offers the forms it has of these (backend.h's
 * layer_install setting AMP_IO_HALF). */
int amp_kind_half_shape(const layer *l);
/* A route's input i (one of amp_kind_half_shape's) on channels-last
 * tensors: the channels it takes, the channels of the tensor it takes them
 * from, and the first of them (groups: group_id's slice). */
int amp_route_channels(const layer *l, int i);
int amp_route_input_channels(const layer *l, int i);
int amp_route_first_channel(const layer *l, int i);

#endif
