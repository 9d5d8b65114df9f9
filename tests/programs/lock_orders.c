/* Two mutexes taken in nested pairs, in a run that always passes.
 *
 *   lock_orders inverted   thread take_a_then_b locks lock_a then lock_b and finishes;
 *                          only then thread take_b_then_a locks lock_b then lock_a. The two
 *                          orders never overlap in time, so this run cannot deadlock, but
 *                          the same two threads started together could (a lock-order
 *                          inversion: each would hold one and wait for the other).
 *   lock_orders ordered    two threads, together, each take lock_a then lock_b ROUNDS times
 *                          (contended, never a deadlock: one order).
 *   lock_orders alone      the main thread alone takes lock_a then lock_b, then lock_b then
 *                          lock_a: both orders, one thread (it cannot deadlock with itself).
 *
 * Prints "done" and exits 0. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define ROUNDS 2000

static pthread_mutex_t lock_a = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t lock_b = PTHREAD_MUTEX_INITIALIZER;
static long balance;

static void *take_a_then_b(void *arg) {
    long rounds = (long)arg;
    for (long i = 0; i < rounds; i++) {
        pthread_mutex_lock(&lock_a);
        pthread_mutex_lock(&lock_b);
        balance++;
        pthread_mutex_unlock(&lock_b);
        pthread_mutex_unlock(&lock_a);
    }
    return NULL;
}

static void *take_b_then_a(void *arg) {
    (void)arg;
    pthread_mutex_lock(&lock_b);
    pthread_mutex_lock(&lock_a);
    balance--;
    pthread_mutex_unlock(&lock_a);
    pthread_mutex_unlock(&lock_b);
    return NULL;
}

int main(int argc, char **argv) {
    int ordered = argc > 1 && !strcmp(argv[1], "ordered");
    pthread_t t1, t2;
    if (argc > 1 && !strcmp(argv[1], "alone")) {
        take_a_then_b((void *)1L);
        take_b_then_a(NULL);
    } else if (ordered) {
        pthread_create(&t1, NULL, take_a_then_b, (void *)(long)ROUNDS);
        pthread_create(&t2, NULL, take_a_then_b, (void *)(long)ROUNDS);
        pthread_join(t1, NULL);
        pthread_join(t2, NULL);
    } else {
        pthread_create(&t1, NULL, take_a_then_b, (void *)1L);
        pthread_join(t1, NULL);
        pthread_create(&t2, NULL, take_b_then_a, NULL);
        pthread_join(t2, NULL);
    }
    printf("done %ld\n", balance);
    return 0;
}
