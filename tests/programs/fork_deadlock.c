/* A supervising parent forks a worker and waits for it (waitpid); the worker deadlocks:
 * two threads take two mutexes in opposite order after a barrier (as mutex_deadlock.c),
 * and its main thread blocks in pthread_join. Every thread of the tree is then blocked on
 * the tree forever: the parent on its child, the child's threads on each other. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static pthread_mutex_t lock_a = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t lock_b = PTHREAD_MUTEX_INITIALIZER;
static pthread_barrier_t both_hold_one;

static void *take_a_then_b(void *arg) {
    (void)arg;
    pthread_mutex_lock(&lock_a);
    pthread_barrier_wait(&both_hold_one);
    pthread_mutex_lock(&lock_b); /* never returns */
    return NULL;
}

static void *take_b_then_a(void *arg) {
    (void)arg;
    pthread_mutex_lock(&lock_b);
    pthread_barrier_wait(&both_hold_one);
    pthread_mutex_lock(&lock_a); /* never returns */
    return NULL;
}

static int worker_main(void) {
    pthread_t t1, t2;
    pthread_barrier_init(&both_hold_one, NULL, 2);
    pthread_create(&t1, NULL, take_a_then_b, NULL);
    pthread_create(&t2, NULL, take_b_then_a, NULL);
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    return 0;
}

int main(void) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return 1;
    }
    if (pid == 0) _exit(worker_main());
    printf("supervising worker %d\n", (int)pid);
    fflush(stdout);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
