/* main returns through pthread_exit while a worker waits on a condition
 * variable nobody will signal: the main thread becomes a zombie (state Z)
 * and the process lives on, blocked, the "exit-blocked" shape. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t shutdown_requested = PTHREAD_COND_INITIALIZER;
static int shutdown_flag = 0;

static void *wait_for_shutdown(void *arg) {
    (void)arg;
    pthread_mutex_lock(&lock);
    while (!shutdown_flag)
        pthread_cond_wait(&shutdown_requested, &lock); /* never signalled */
    pthread_mutex_unlock(&lock);
    return NULL;
}

int main(void) {
    pthread_t worker;
    pthread_create(&worker, NULL, wait_for_shutdown, NULL);
    pthread_setname_np(worker, "shutdown_wait");
    printf("main exiting\n");
    fflush(stdout);
    pthread_exit(NULL);
}
