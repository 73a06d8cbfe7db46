/* A stand-in for libcuda.so.1 with the four functions the C launch path (_claunch.c) calls, so
 * that tests/claunch_torch_probe.py can drive that path without a GPU: built with the soname
 * libcuda.so.1 and loaded first, it is the library _claunch's dlopen("libcuda.so.1") finds.
 * cuLaunchKernel records its call in `last_launch` and launches nothing. */
#include <stddef.h>

typedef struct {
    long long count;
    void *function;
    unsigned grid[3], block[3], shared;
    void *stream;
    void **params;
    void **extra;
} Launch;

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
    Launch l = {last_launch.count + 1, function, {gx, gy, gz}, {bx, by, bz}, shared, stream, params, extra};
    last_launch = l;
    return 0;
}
