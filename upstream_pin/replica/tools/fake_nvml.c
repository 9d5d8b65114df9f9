/* fake_nvml.c - a stand-in libnvidia-ml.so.1 for machines without a GPU.
 *
 * Provides just the four NVML calls the replica looks up with dlsym, with
 * fixed readings (GPU 37%, 2.0 of 80.0 GiB used), so the util/gpu_percent,
 * util/vram_used_gb and util/vram_total_gb log keys can be exercised:
 *
 *   gcc -shared -fPIC -o /tmp/fake-nvml/libnvidia-ml.so.1 tools/fake_nvml.c
 *   LD_LIBRARY_PATH=/tmp/fake-nvml ./puffer train breakout ...
 *
 * FAKE_NVML_FAIL=1 makes nvmlInit_v2 fail (the keys then stay absent).
 */
#include <stdlib.h>

typedef struct { unsigned int gpu, memory; } Utilization;
typedef struct { unsigned long long total, free, used; } Memory;

static int device_token;

int nvmlInit_v2(void) {
    const char* fail = getenv("FAKE_NVML_FAIL");
    return fail && *fail == '1' ? 1 : 0;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void** device) {
    if (index != 0) return 2;
    *device = &device_token;
    return 0;
}

int nvmlDeviceGetUtilizationRates(void* device, Utilization* u) {
    (void)device;
    u->gpu = 37;
    u->memory = 5;
    return 0;
}

int nvmlDeviceGetMemoryInfo(void* device, Memory* m) {
    (void)device;
    m->total = 80ULL << 30;
    m->used = 2ULL << 30;
    m->free = m->total - m->used;
    return 0;
}
