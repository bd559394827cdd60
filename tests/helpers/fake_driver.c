/* A stand-in libcuda for tests of the launch path's marshalling without a GPU: each call records
   its arguments, as the C calling convention delivers them, in `seen`. */
#include <stddef.h>
#include <stdint.h>

uint64_t seen[16];
int launches;
static void* ctx = (void*)0x1000;
void* module_ctx;  /* where set, a launch in another context fails as the driver's does */

/* CUlaunchConfig as the driver's header lays it out (the attributes are not read here) */
typedef struct {
    unsigned grid[3], block[3], shared;
    void* stream;
    void* attrs;
    unsigned num_attrs;
} Config;

int cuLaunchKernelEx(const Config* c, void* f, void** params, void** extra) {
    if (module_ctx && ctx != module_ctx) return ctx ? 400 : 201;  /* INVALID_HANDLE, INVALID_CONTEXT */
    uint64_t v[] = {(uint64_t)f, c->grid[0], c->grid[1], c->grid[2], c->block[0], c->block[1],
                    c->block[2], c->shared, (uint64_t)c->stream, (uint64_t)*(void**)params[0],
                    (uint64_t)*(int*)params[3], (uint64_t)extra};
    for (int i = 0; i < 12; ++i) seen[i] = v[i];
    seen[12] = (uint64_t)ctx;
    seen[13] = c->num_attrs;
    ++launches;
    return 0;
}
int cuCtxGetCurrent(void** c) { *c = ctx; return 0; }
int cuCtxSetCurrent(void* c) { ctx = c; return 0; }
int cuMemsetD8Async(void* p, unsigned char v, size_t n, void* s) { return 0; }
int cuTensorMapEncodeTiled(void) { return 0; }
int cuOccupancyMaxActiveClusters(void) { return 0; }
int cuGetErrorName(int e, const char** s) { *s = "CUDA_ERROR_FAKE"; return 0; }
int cuDeviceGet(int* d, int i) { *d = i; return 0; }
int cuDevicePrimaryCtxRetain(void** c, int d) { *c = (void*)0x2000; return 0; }
