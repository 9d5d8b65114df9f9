/* The report's shape: the main thread busy-waits (one core) for workers that never arrive,
 * because they wait on a condition variable nobody signals: ~100% of one core, the workers
 * in futex waits, no output. The "spin-on-blocked-workers" shape. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

#define WORKERS 3
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t go = PTHREAD_COND_INITIALIZER;
static int started = 0;
static atomic_int arrived = 0;

static void *worker_main(void *arg) {
    (void)arg;
    pthread_mutex_lock(&lock);
    while (!started)
        pthread_cond_wait(&go, &lock); /* never signalled */
    pthread_mutex_unlock(&lock);
    atomic_fetch_add(&arrived, 1);
    return NULL;
}

static void wait_for_workers(void) {
    while (atomic_load(&arrived) < WORKERS) {
    } /* spins: the handshake of a busy-wait start-up */
}

int main(void) {
    pthread_t t[WORKERS];
    for (int i = 0; i < WORKERS; i++)
        pthread_create(&t[i], NULL, worker_main, NULL);
    wait_for_workers();
    return 0;
}
