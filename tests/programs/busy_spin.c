/* The main thread spins forever on arithmetic: 100% of a core, no output,
 * no syscalls, so only CPU accounting and a stack can tell what it is doing. */
#include <stdint.h>

static volatile uint64_t state = 1;

static void spin_forever(void) {
    for (;;) {
        /* xorshift step; volatile keeps the compiler from removing the loop */
        uint64_t x = state;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        state = x;
    }
}

int main(void) {
    spin_forever();
    return 0;
}
