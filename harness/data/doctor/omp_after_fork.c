/* harness doctor, probe "openmp-after-fork" (the libgomp fork hazard).
 *
 * Parent: a 2-thread team (so libgomp keeps a pool), then fork(); the child runs a region in
 * its main thread. The parent polls for the child, records where it sits, and kills it at
 * the deadline itself, so the probe never depends on the harness to clean up.
 *
 * Usage: omp_after_fork [limit_seconds]; prints parent-team=N, then child-done team=N or
 * child-state=S wchan=W and child-hung after=Xs.
 */
#define _GNU_SOURCE
#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int team_size(void) {
    int team = 0;
#pragma omp parallel num_threads(2)
    {
#pragma omp single
        team = omp_get_num_threads();
    }
    return team;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void read_line(const char *path, char *buf, size_t n) {
    FILE *f = fopen(path, "r");
    if (!f || !fgets(buf, (int)n, f)) snprintf(buf, n, "?");
    if (f) fclose(f);
    buf[strcspn(buf, "\n")] = 0;
}

static void describe(pid_t pid) {
    char path[64], stat[512], wchan[128];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    read_line(path, stat, sizeof stat);
    snprintf(path, sizeof path, "/proc/%d/wchan", (int)pid);
    read_line(path, wchan, sizeof wchan);
    char *end = strrchr(stat, ')');
    printf("child-state=%c wchan=%s\n", end && end[1] ? end[2] : '?', wchan);
}

int main(int argc, char **argv) {
    double limit = argc > 1 ? atof(argv[1]) : 3.0;
    printf("parent-team=%d\n", team_size());
    fflush(stdout);
    pid_t child = fork();
    if (child < 0) { perror("fork"); return 3; }
    if (child == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() == 1) _exit(100);
        _exit(team_size());
    }
    int status = 0;
    for (double deadline = now() + limit; now() < deadline;) {
        if (waitpid(child, &status, WNOHANG) == child) {
            printf("child-done team=%d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
            return 0;
        }
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    describe(child);
    kill(child, SIGKILL);
    waitpid(child, &status, 0);
    printf("child-hung after=%.1fs\n", limit);
    return 0;
}
