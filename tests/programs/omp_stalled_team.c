/* An OpenMP team that never leaves its parallel region: thread 0 stops for good (pause),
 * the other members wait for it at the region's implicit barrier, inside libgomp (a futex
 * wait on the barrier's generation word, no mutex). Prints "team of N" first.
 * Built with -fopenmp by tests/test_locks.py; without it the region runs serially. */
#define _GNU_SOURCE
#include <stdio.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

static int team_size(void) {
#ifdef _OPENMP
    return omp_get_num_threads();
#else
    return 1;
#endif
}

static int member(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

int main(void) {
#pragma omp parallel num_threads(3)
    {
        if (member() == 0) {
            printf("team of %d\n", team_size());
            fflush(stdout);
            for (;;) {
                pause(); /* never leaves the region: the rest of the team waits */
            }
        }
    }
    return 0;
}
