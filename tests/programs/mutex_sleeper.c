/* A mutex held by a thread that sleeps: `holder` takes the lock and then sleeps forever
 * (it is not blocked on any lock), `waiter` wants the lock and blocks. A wait with a known
 * owner, but no wait-for cycle. Prints "holder holds" and "waiter wants"; main joins. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

static pthread_mutex_t config_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_barrier_t holder_has_it;

static void *hold_and_sleep(void *arg) {
    (void)arg;
    pthread_mutex_lock(&config_lock);
    printf("holder holds\n");
    fflush(stdout);
    pthread_barrier_wait(&holder_has_it);
    for (;;) {
        sleep(60); /* holds config_lock while it sleeps */
    }
    return NULL;
}

static void *want_lock(void *arg) {
    (void)arg;
    pthread_barrier_wait(&holder_has_it);
    printf("waiter wants\n");
    fflush(stdout);
    pthread_mutex_lock(&config_lock); /* blocks until the holder wakes up: never */
    pthread_mutex_unlock(&config_lock);
    return NULL;
}

int main(void) {
    pthread_t holder, waiter;
    pthread_barrier_init(&holder_has_it, NULL, 2);
    pthread_create(&holder, NULL, hold_and_sleep, NULL);
    pthread_setname_np(holder, "holder");
    pthread_create(&waiter, NULL, want_lock, NULL);
    pthread_setname_np(waiter, "waiter");
    pthread_join(waiter, NULL);
    pthread_join(holder, NULL);
    return 0;
}
