/* Three threads wait on a condition variable (untimed pthread_cond_wait); a timer thread
 * sleeps SECONDS (default 8) in nanosleep, then broadcasts; everyone exits 0. The waiters
 * wait on the tree, the timer thread's sleep is timed: not a deadlock. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static pthread_mutex_t gate = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t go = PTHREAD_COND_INITIALIZER;
static int started;
static int seconds = 8;

static void *waiter(void *arg) {
    (void)arg;
    pthread_mutex_lock(&gate);
    while (!started) pthread_cond_wait(&go, &gate);
    pthread_mutex_unlock(&gate);
    return NULL;
}

static void *timer(void *arg) {
    (void)arg;
    struct timespec ts = {seconds, 0};
    while (nanosleep(&ts, &ts) != 0) {
    }
    pthread_mutex_lock(&gate);
    started = 1;
    pthread_cond_broadcast(&go);
    pthread_mutex_unlock(&gate);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc > 1) seconds = atoi(argv[1]);
    pthread_t w[3], t;
    for (int i = 0; i < 3; i++) pthread_create(&w[i], NULL, waiter, NULL);
    pthread_create(&t, NULL, timer, NULL);
    for (int i = 0; i < 3; i++) pthread_join(w[i], NULL);
    pthread_join(t, NULL);
    printf("released after %d s\n", seconds);
    return 0;
}
