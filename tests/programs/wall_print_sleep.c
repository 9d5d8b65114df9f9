/* Prints one line, then sleeps in nanosleep forever (a loop of one-hour sleeps) in
 * `wait_for_nothing`: silent, no CPU, every wait timed. At a wall limit shorter than the
 * stall window this is a hang of mechanism idle located in wait_for_nothing, not a run
 * "still making progress" (the single line long before the wall is not progress now). */
#include <stdio.h>
#include <time.h>

static void wait_for_nothing(void) {
    struct timespec hour = {3600, 0};
    for (;;)
        nanosleep(&hour, NULL);
}

int main(void) {
    printf("started\n");
    fflush(stdout);
    wait_for_nothing();
    return 0;
}
