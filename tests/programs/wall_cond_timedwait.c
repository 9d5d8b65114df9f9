/* Two threads wake every second from pthread_cond_timedwait on a condition variable that
 * nobody signals, check a flag nobody sets, and wait again (`poll_for_work`); main joins
 * them. Every wait is timed and the process uses no CPU to speak of: a hang of mechanism
 * idle at the stall or wall limit, not a deadlock (no thread waits for another). */
#include <pthread.h>
#include <stdio.h>
#include <time.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t work = PTHREAD_COND_INITIALIZER;
static volatile int have_work = 0;

static void *poll_for_work(void *arg) {
    (void)arg;
    pthread_mutex_lock(&lock);
    while (!have_work) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 1;
        pthread_cond_timedwait(&work, &lock, &until);
    }
    pthread_mutex_unlock(&lock);
    return NULL;
}

int main(void) {
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, poll_for_work, NULL);
    printf("polling\n");
    fflush(stdout);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    return 0;
}
