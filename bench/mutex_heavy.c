/* The mutex-heavy micro-benchmark of bench/bench_hazards.py: THREADS threads, each ROUNDS
 * times taking lock_outer then lock_inner (one order: no hazard) around a tiny update, and
 * every 64th round a private mutex of its own under lock_outer (a second edge). Prints the
 * wall time and the nanoseconds per nested pair.
 *
 *     mutex_heavy [ROUNDS] [THREADS]      (defaults 2000000 and 2) */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static pthread_mutex_t lock_outer = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t lock_inner = PTHREAD_MUTEX_INITIALIZER;
static long counter;
static long rounds;

static void *worker(void *arg) {
    pthread_mutex_t own = PTHREAD_MUTEX_INITIALIZER;
    long mine = 0;
    (void)arg;
    for (long i = 0; i < rounds; i++) {
        pthread_mutex_lock(&lock_outer);
        pthread_mutex_lock(&lock_inner);
        counter++;
        pthread_mutex_unlock(&lock_inner);
        if ((i & 63) == 0) {
            pthread_mutex_lock(&own);
            mine++;
            pthread_mutex_unlock(&own);
        }
        pthread_mutex_unlock(&lock_outer);
    }
    return (void *)mine;
}

int main(int argc, char **argv) {
    rounds = argc > 1 ? atol(argv[1]) : 2000000;
    int n = argc > 2 ? atoi(argv[2]) : 2;
    if (n < 1 || n > 64 || rounds < 1) return 2;
    pthread_t t[64];
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int i = 0; i < n; i++) pthread_create(&t[i], NULL, worker, NULL);
    for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double s = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
    printf("seconds %.4f ns_per_pair %.1f counter %ld\n", s, s * 1e9 / ((double)rounds * n), counter);
    return 0;
}
