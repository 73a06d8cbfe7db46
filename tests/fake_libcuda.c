/* A stand-in for libcuda.so.1 with the five functions the C launch path (_claunch.c) calls, so
 * that tests/claunch_torch_probe.py can drive that path without a GPU: built with the soname
 * libcuda.so.1 and loaded first, it is the library _claunch's dlopen("libcuda.so.1") finds.
 * cuLaunchKernel and cuLaunchKernelEx record their call in `last_launch` and launch nothing. */
#include <stddef.h>

typedef struct {
    long long count;
    void *function;
    unsigned grid[3], block[3], shared;
    void *stream;
    void **params;
    void **extra;
    int programmatic; /* cuLaunchKernelEx with the programmatic stream serialization attribute set */
} Launch;

/* cuda.h's CUlaunchAttribute and CUlaunchConfig */
typedef struct {
    int id;
    char pad[4];
    union {
        char bytes[64];
        int allowed;
    } value;
} Attribute;
typedef struct {
    unsigned grid[3], block[3], shared;
    void *stream;
    Attribute *attrs;
    unsigned count;
} Config;

Launch last_launch;
/* the context cuCtxGetCurrent reports current (and cuStreamGetCtx a stream's); tests change it */
void *current_context = (void *)0x1000;

int cuCtxGetCurrent(void **context) {
    *context = current_context;
    return 0;
}

int cuCtxGetDevice(int *device) {
    *device = 0;
    return 0;
}

int cuStreamGetCtx(void *stream, void **context) {
    *context = current_context;
    return 0;
}

int cuLaunchKernel(void *function, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   unsigned shared, void *stream, void **params, void **extra) {
    Launch l = {last_launch.count + 1, function, {gx, gy, gz}, {bx, by, bz}, shared, stream, params, extra, 0};
    last_launch = l;
    return 0;
}

int cuLaunchKernelEx(const Config *c, void *function, void **params, void **extra) {
    int allowed = 0;
    for (unsigned i = 0; i < c->count; i++)
        if (c->attrs[i].id == 6) allowed = c->attrs[i].value.allowed; /* PROGRAMMATIC_STREAM_SERIALIZATION */
    Launch l = {last_launch.count + 1, function, {c->grid[0], c->grid[1], c->grid[2]},
                {c->block[0], c->block[1], c->block[2]}, c->shared, c->stream, params, extra, allowed};
    last_launch = l;
    return 0;
}
