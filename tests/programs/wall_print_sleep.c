/* Prints one line, then sleeps in nanosleep forever (a loop of one-second sleeps) in
 * `wait_for_nothing`: silent, no CPU, every wait timed. At a wall limit shorter than the
 * stall window this is a hang of mechanism idle located in wait_for_nothing, not a run
 * "still making progress" (the single line long before the wall is not progress now).
 * Each sleep ends before the wall: a timed wait, not one past the run's limit (which the
 * wake graph would call early: docs/quiescence.md, "Deadlines"). */
#include <stdio.h>
#include <time.h>

static void wait_for_nothing(void) {
    struct timespec second = {1, 0};
    for (;;)
        nanosleep(&second, NULL);
}

int main(void) {
    printf("started\n");
    fflush(stdout);
    wait_for_nothing();
    return 0;
}
