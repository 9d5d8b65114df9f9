/* A hang that depends on the CPUs the program is given: two parts of one program count
 * CPUs two different ways.
 *
 * The real-world shape: a trainer sizes its worker pool from the CPUs it may run on
 * (sched_getaffinity, as Python's os.sched_getaffinity or a container-aware launcher do),
 * while a library it calls sizes a rendezvous from the CPUs online
 * (sysconf(_SC_NPROCESSORS_ONLN), as os.cpu_count() or an OpenMP runtime without affinity
 * support do), and waits there for one participant per CPU. On a workstation the two
 * counts agree and the step completes. In a container (a cpuset, `taskset`, Kubernetes CPU
 * pinning) the affinity is smaller than the CPUs online: the pool has fewer workers than
 * the rendezvous waits for, and every worker waits in pthread_barrier_wait forever while
 * main waits in pthread_join. No timeout, no sleep: a real untimed barrier.
 *
 * Prints "pool P, barrier B" at start, then "done" when the step completed (exit 0). */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <unistd.h>

#define MAX_WORKERS 1024

static pthread_barrier_t step_done;
static double partial[MAX_WORKERS];

/* the trainer's side: how many workers it may run at once */
static int pool_size(void) {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0)
        return 1;
    return CPU_COUNT(&set);
}

/* the library's side: one participant per CPU online */
static int rendezvous_size(void) {
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    return online > 0 ? (int)online : 1;
}

static void *reduce_shard(void *arg) {
    long me = (long)arg;
    double sum = 0;
    for (long i = 0; i < 100000; i++)
        sum += (double)(i % (me + 7));
    partial[me] = sum;
    pthread_barrier_wait(&step_done); /* waits for rendezvous_size() participants */
    return NULL;
}

int main(void) {
    int pool = pool_size(), barrier = rendezvous_size();
    if (pool > MAX_WORKERS)
        pool = MAX_WORKERS;
    printf("pool %d, barrier %d\n", pool, barrier);
    fflush(stdout);
    pthread_barrier_init(&step_done, NULL, (unsigned)barrier);
    pthread_t workers[MAX_WORKERS];
    for (long i = 0; i < pool; i++)
        pthread_create(&workers[i], NULL, reduce_shard, (void *)i);
    for (int i = 0; i < pool; i++)
        pthread_join(workers[i], NULL);
    double total = 0;
    for (int i = 0; i < pool; i++)
        total += partial[i];
    printf("done: %d shards, total %.0f\n", pool, total);
    return 0;
}
