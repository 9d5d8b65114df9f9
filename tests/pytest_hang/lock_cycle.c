/* Two threads take two mutexes in opposite order (a barrier makes the cycle certain);
   deadlock() joins them, so the caller waits for ever in native code. */
#include <pthread.h>

static pthread_mutex_t a = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t b = PTHREAD_MUTEX_INITIALIZER;
static pthread_barrier_t both;

static void *take_a_then_b(void *arg) {
    (void)arg;
    pthread_mutex_lock(&a);
    pthread_barrier_wait(&both);
    pthread_mutex_lock(&b);
    return 0;
}

static void *take_b_then_a(void *arg) {
    (void)arg;
    pthread_mutex_lock(&b);
    pthread_barrier_wait(&both);
    pthread_mutex_lock(&a);
    return 0;
}

int deadlock(void) {
    pthread_t one, two;
    pthread_barrier_init(&both, 0, 2);
    pthread_create(&one, 0, take_a_then_b, 0);
    pthread_create(&two, 0, take_b_then_a, 0);
    pthread_join(one, 0);
    pthread_join(two, 0);
    return 0;
}
