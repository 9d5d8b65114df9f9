/* N worker threads (default 64, argv[1]) block forever on one condition variable that is
 * never signalled, behind an always-inlined helper (an inline frame for eu-stack -i even
 * at -O0); main prints "all N waiting" once every worker has taken the lock and waits,
 * then blocks in pthread_join. A stack-sampling benchmark and test target. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static pthread_mutex_t gate = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t never = PTHREAD_COND_INITIALIZER;
static pthread_cond_t arrived = PTHREAD_COND_INITIALIZER;
static int waiting;

static inline __attribute__((always_inline)) void wait_for_work(void) {
    pthread_mutex_lock(&gate);
    waiting++;
    pthread_cond_signal(&arrived);
    for (;;)
        pthread_cond_wait(&never, &gate); /* never signalled */
}

static void *pool_worker(void *arg) {
    (void)arg;
    wait_for_work();
    return NULL;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 64;
    if (n < 1 || n > 4096) {
        fprintf(stderr, "usage: threads64 [1..4096]\n");
        return 64;
    }
    pthread_t *t = calloc((size_t)n, sizeof *t);
    for (int i = 0; i < n; i++) {
        char name[16];
        pthread_create(&t[i], NULL, pool_worker, NULL);
        snprintf(name, sizeof name, "pool_%d", i);
        pthread_setname_np(t[i], name);
    }
    pthread_mutex_lock(&gate);
    while (waiting < n)
        pthread_cond_wait(&arrived, &gate);
    pthread_mutex_unlock(&gate);
    printf("all %d waiting\n", n);
    fflush(stdout);
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    return 0;
}
