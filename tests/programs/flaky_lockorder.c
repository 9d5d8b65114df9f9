/* A lock-order race that deadlocks in only some runs, decided by real thread timing.
 *
 * take_a_then_b locks lock_a, then lock_b; take_b_then_a locks lock_b, then lock_a. Both
 * leave one barrier together and each works a little between its two locks. The run
 * deadlocks when both threads hold their first lock before either asks for its second;
 * otherwise one takes both locks first, the other waits its turn, and the run prints
 * "done" and exits 0. A deadlock is a real one: both threads block in pthread_mutex_lock
 * forever (no timed or try locks in the race) and main blocks in pthread_join.
 *
 * Why a calibration first: how close together two released threads take their first
 * locks ranges from a fraction of a microsecond (each on an idle CPU of its own) to
 * milliseconds (a loaded machine, or one CPU for both, where they interleave only when one
 * yields or is preempted). A fixed amount of work would deadlock in nearly every run on
 * one host and in none on another. So the threads first play CALIBRATION_ROUNDS rounds of
 * the very same race, except that each asks for its second lock with trylock: a trylock
 * that fails is a round that would have deadlocked (its owner holds our second lock and
 * will not release it before getting our first, which we hold), and nothing blocks. After
 * each round both threads adjust the work (a staircase): longer after a round that went
 * through, shorter, by a slightly larger step, after one that would have deadlocked: it
 * settles where 45% of the rounds would deadlock, and the last round, played with
 * pthread_mutex_lock, is one more round of that staircase. Measured over 100 runs each on
 * a shared 2-CPU machine: 46% of runs deadlock alone, 53% pinned to one CPU, 52% and 57%
 * beside 2 and 4 busy loops (versions with a fixed window, or one sized from the skew
 * measured at a futex barrier, deadlocked in 15% or 75% of runs on the same machine).
 * Nothing draws a random number: how the threads happen to interleave decides each round.
 *
 * Prints "start" (so a watchdog sees output), nothing while it races, "done" when both
 * transfers completed. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

#define CALIBRATION_ROUNDS 64
#define FIRST_WORK_NS 1000
/* the staircase's steps, in thousandths: x1.25 after a round that went through, /1.314
 * (1.25^(55/45)) after one that would have deadlocked; these log-steps balance where 45%
 * of the rounds would deadlock (up / (up + down) = 45 / (45 + 55)) */
#define LONGER 1250
#define SHORTER 1314

static pthread_mutex_t lock_a = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t lock_b = PTHREAD_MUTEX_INITIALIZER;
static atomic_int arrived, generation;            /* the barrier (see release) */
static int would_deadlock[2][CALIBRATION_ROUNDS]; /* per thread, per round */
static long balance_a = 100, balance_b = 100;

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* A barrier both threads wait at running (yielding to anyone else runnable), so that both
 * leave it as soon as the store that opens it reaches them, not after the tens of
 * microseconds a futex sleeper takes to wake; with one CPU for both the yield lets the
 * other thread in. */
static void release(void) {
    int round = atomic_load(&generation);
    if (atomic_fetch_add(&arrived, 1) == 1) { /* the second thread to arrive opens it */
        atomic_store(&arrived, 0);
        atomic_store(&generation, round + 1);
        return;
    }
    while (atomic_load(&generation) == round)
        sched_yield();
}

/* the work between the two locks: for work_ns after `since`, checking the balances as a
 * transfer would, yielding between checks (as code that logs or allocates gives the
 * scheduler its chances) so that the other thread can interleave on a shared CPU */
static void audit_balances(long long since, long long work_ns) {
    volatile long sum = 0;
    while (now_ns() - since < work_ns) {
        sum += balance_a + balance_b;
        sched_yield();
    }
}

static void move(long amount) {
    balance_a -= amount;
    balance_b += amount;
}

/* CALIBRATION_ROUNDS rounds that ask for the second lock with trylock, then the race,
 * which asks with pthread_mutex_lock: one loop, the same code, so that the race round
 * runs exactly like the calibration rounds (a separate copy of the code ran differently
 * enough, from cold caches, to halve the rate) */
static void transfer(int me, pthread_mutex_t *first, pthread_mutex_t *second, long amount) {
    long long work_ns = FIRST_WORK_NS;
    for (int round = 0; round <= CALIBRATION_ROUNDS; round++) {
        int (*take_second)(pthread_mutex_t *) =
            round < CALIBRATION_ROUNDS ? pthread_mutex_trylock : pthread_mutex_lock;
        release(); /* the last time: the race */
        long long start = now_ns();
        pthread_mutex_lock(first);
        audit_balances(start, work_ns);
        /* in the race: blocks forever when the other thread holds it */
        int failed = take_second(second) != 0;
        if (!failed) {
            move(amount);
            pthread_mutex_unlock(second);
        }
        pthread_mutex_unlock(first);
        if (round == CALIBRATION_ROUNDS)
            break;
        would_deadlock[me][round] = failed;
        release(); /* both outcomes of the round are in */
        /* both threads compute the same next step from the same outcomes */
        if (would_deadlock[0][round] || would_deadlock[1][round])
            work_ns = work_ns * 1000 / SHORTER;
        else
            work_ns = work_ns * LONGER / 1000 + 1;
    }
}

static void *take_a_then_b(void *arg) {
    (void)arg;
    transfer(0, &lock_a, &lock_b, 10);
    return NULL;
}

static void *take_b_then_a(void *arg) {
    (void)arg;
    transfer(1, &lock_b, &lock_a, -10);
    return NULL;
}

int main(void) {
    printf("start\n");
    fflush(stdout);
    pthread_t t1, t2;
    pthread_create(&t1, NULL, take_a_then_b, NULL);
    pthread_setname_np(t1, "take_a_then_b");
    pthread_create(&t2, NULL, take_b_then_a, NULL);
    pthread_setname_np(t2, "take_b_then_a");
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    printf("done: balances %ld %ld\n", balance_a, balance_b);
    return 0;
}
