/* Four threads sleep in nanosleep for SECONDS (default 10) and exit; main joins them and
 * exits 0. Silent while it sleeps: only a timed wait keeps it from being a deadlock. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static int seconds = 10;

static void *nap(void *arg) {
    (void)arg;
    struct timespec ts = {seconds, 0};
    while (nanosleep(&ts, &ts) != 0) {
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc > 1) seconds = atoi(argv[1]);
    pthread_t t[4];
    for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, nap, NULL);
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    printf("slept %d s\n", seconds);
    return 0;
}
