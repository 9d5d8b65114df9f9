/* Two threads take two mutexes in opposite order: a classic lock-order deadlock.
 * A barrier makes it certain: each thread holds its first lock before either
 * asks for its second, so neither can ever proceed. main blocks in join. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>

static pthread_mutex_t account_a = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t account_b = PTHREAD_MUTEX_INITIALIZER;
static pthread_barrier_t both_hold_one;
static long balance_a = 100, balance_b = 100;

static void *transfer_a_to_b(void *arg) {
    (void)arg;
    pthread_mutex_lock(&account_a);
    printf("transfer_a_to_b holds account_a\n");
    fflush(stdout);
    pthread_barrier_wait(&both_hold_one);
    pthread_mutex_lock(&account_b); /* never returns: transfer_b_to_a holds it */
    balance_a -= 10;
    balance_b += 10;
    pthread_mutex_unlock(&account_b);
    pthread_mutex_unlock(&account_a);
    return NULL;
}

static void *transfer_b_to_a(void *arg) {
    (void)arg;
    pthread_mutex_lock(&account_b);
    printf("transfer_b_to_a holds account_b\n");
    fflush(stdout);
    pthread_barrier_wait(&both_hold_one);
    pthread_mutex_lock(&account_a); /* never returns: transfer_a_to_b holds it */
    balance_b -= 10;
    balance_a += 10;
    pthread_mutex_unlock(&account_a);
    pthread_mutex_unlock(&account_b);
    return NULL;
}

int main(void) {
    pthread_t t1, t2;
    pthread_barrier_init(&both_hold_one, NULL, 2);
    pthread_create(&t1, NULL, transfer_a_to_b, NULL);
    pthread_setname_np(t1, "xfer_a_to_b");
    pthread_create(&t2, NULL, transfer_b_to_a, NULL);
    pthread_setname_np(t2, "xfer_b_to_a");
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    printf("balances %ld %ld\n", balance_a, balance_b);
    return 0;
}
