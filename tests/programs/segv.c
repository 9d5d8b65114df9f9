/* Prints one line, then dereferences NULL in a named function: a crash
 * with a known location (SIGSEGV, exit status -11). */
#include <stdio.h>

struct config {
    int batch_size;
};

static int read_batch_size(const struct config *cfg) {
    return cfg->batch_size; /* cfg is NULL */
}

int main(void) {
    printf("loading config\n");
    fflush(stdout);
    struct config *volatile cfg = NULL;
    return read_batch_size(cfg);
}
