/* Three threads, three mutexes, a cycle: cycle_t1 holds A and wants B, cycle_t2 holds B
 * and wants C, cycle_t3 holds C and wants A. A barrier makes it certain: each thread
 * holds its first lock before any asks for its second. main blocks in join.
 * argv[1] picks the mutexes' kind: "normal" (default), "robust" or "pi"
 * (PTHREAD_PRIO_INHERIT), the three ways glibc waits for a mutex. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <string.h>

static pthread_mutex_t locks[3]; /* A, B, C */
static pthread_barrier_t all_hold_one;

static void *take_two(void *arg) {
    long i = (long)arg;
    pthread_mutex_lock(&locks[i]);
    printf("cycle_t%ld holds %c\n", i + 1, (int)('A' + i));
    fflush(stdout);
    pthread_barrier_wait(&all_hold_one);
    pthread_mutex_lock(&locks[(i + 1) % 3]); /* never returns: the next thread holds it */
    pthread_mutex_unlock(&locks[(i + 1) % 3]);
    pthread_mutex_unlock(&locks[i]);
    return NULL;
}

int main(int argc, char **argv) {
    const char *kind = argc > 1 ? argv[1] : "normal";
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    if (strcmp(kind, "robust") == 0) {
        pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
    } else if (strcmp(kind, "pi") == 0) {
        pthread_mutexattr_setprotocol(&attr, PTHREAD_PRIO_INHERIT);
    } else if (strcmp(kind, "normal") != 0) {
        fprintf(stderr, "usage: mutex_cycle3 [normal|robust|pi]\n");
        return 2;
    }
    for (int i = 0; i < 3; i++) {
        pthread_mutex_init(&locks[i], &attr);
    }
    pthread_barrier_init(&all_hold_one, NULL, 3);
    pthread_t t[3];
    char name[16];
    for (long i = 0; i < 3; i++) {
        pthread_create(&t[i], NULL, take_two, (void *)i);
        snprintf(name, sizeof(name), "cycle_t%ld", i + 1);
        pthread_setname_np(t[i], name);
    }
    for (int i = 0; i < 3; i++) {
        pthread_join(t[i], NULL);
    }
    return 0;
}
