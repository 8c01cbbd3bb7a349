/* ckpt.h - safetensors checkpoints of a gpt_t (weights, or gradients).
 *
 * File format (https://huggingface.co/docs/safetensors): an 8-byte
 * little-endian header length N, N bytes of JSON mapping tensor names to
 * {"dtype":"F32","shape":[...],"data_offsets":[begin,end]} (plus an optional
 * "__metadata__" object of strings), then the raw little-endian data. Tensor
 * names and shapes are autoresearch's PyTorch module names (gpt.h), so a
 * checkpoint loads into that model with load_state_dict.
 *
 * Writes are atomic: a temp file in the same directory, fsync, rename. */
#ifndef NIGHTSHIFT_CKPT_H
#define NIGHTSHIFT_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "engine/gpt.h"

/* Write m's tensor table over the floats at base (m->params for weights,
 * m->grads for gradients) to path. metadata_json, if not NULL, is a JSON object
 * of string values stored as "__metadata__". Returns 0 or -1 with err. */
int ckpt_write(const gpt_t *m, const float *base, const char *metadata_json, const char *path,
               char *err, size_t errlen);

/* Load weights into m->params. The file must hold exactly m's tensors (same
 * names, F32, same shapes), no more, no fewer; anything else is an error that
 * names the tensor and what differs. m is unchanged on failure. */
int ckpt_load(gpt_t *m, const char *path, char *err, size_t errlen);

/* A safetensors file read whole, for tests and tools. */
typedef struct {
    char name[128];
    int ndim;
    int64_t shape[4];
    size_t numel;
    const float *data; /* points into the file's buffer */
} ckpt_tensor_t;

typedef struct {
    int n;
    ckpt_tensor_t *tensors; /* owned */
    char *metadata;         /* owned; "__metadata__" as JSON text, or NULL */
    void *buf;              /* owned; the file's data */
    size_t buflen;
} ckpt_file_t;

/* Read and check a whole file (F32 tensors only, offsets in bounds, contiguous
 * and non-overlapping, header JSON valid). Returns 0 or -1 with err. The caller
 * releases f with ckpt_file_close. */
int ckpt_read(const char *path, ckpt_file_t *f, char *err, size_t errlen);
const ckpt_tensor_t *ckpt_file_find(const ckpt_file_t *f, const char *name);
void ckpt_file_close(ckpt_file_t *f);

#endif
