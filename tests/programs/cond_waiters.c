/* Threads that wait, but on no mutex: cond_wait1 and cond_wait2 wait on a condition
 * variable nobody signals (the predicate never becomes true), barrier_wait waits at a
 * barrier of two that nobody else reaches. Each prints "<name> waits" first; main blocks
 * in join. No thread holds a lock another one wants: no wait-for cycle. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>

static pthread_mutex_t state_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t state_changed = PTHREAD_COND_INITIALIZER;
static pthread_barrier_t never_full;
static int ready = 0;

static void *wait_for_ready(void *arg) {
    pthread_mutex_lock(&state_lock);
    printf("%s waits\n", (const char *)arg);
    fflush(stdout);
    while (!ready) {
        pthread_cond_wait(&state_changed, &state_lock); /* releases state_lock */
    }
    pthread_mutex_unlock(&state_lock);
    return NULL;
}

static void *wait_at_barrier(void *arg) {
    printf("%s waits\n", (const char *)arg);
    fflush(stdout);
    pthread_barrier_wait(&never_full); /* the second party never comes */
    return NULL;
}

int main(void) {
    pthread_t t[3];
    pthread_barrier_init(&never_full, NULL, 2);
    pthread_create(&t[0], NULL, wait_for_ready, "cond_wait1");
    pthread_setname_np(t[0], "cond_wait1");
    pthread_create(&t[1], NULL, wait_for_ready, "cond_wait2");
    pthread_setname_np(t[1], "cond_wait2");
    pthread_create(&t[2], NULL, wait_at_barrier, "barrier_wait");
    pthread_setname_np(t[2], "barrier_wait");
    for (int i = 0; i < 3; i++) {
        pthread_join(t[i], NULL);
    }
    return 0;
}
