/* An OpenMP team, then fork(): the shape of the replica's container entry, small.
 *
 *   omp_fork_child region   the parent runs a parallel region of 2 threads (its pool stays
 *                           alive), forks, and the child runs a parallel region on its only
 *                           thread: GNU libgomp deadlocks there (the pool it waits for does
 *                           not exist in the child); LLVM's libomp re-initialises after fork
 *                           and the child finishes
 *   omp_fork_child none     the same, but the child runs no region: it finishes anywhere
 *
 * The parent waits for the child and exits with its status; prints "child N" from the child.
 * Built with -fopenmp by its tests (clang with libomp, or gcc with libgomp). */
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int team_sum(int n) {
    int sum = 0;
#pragma omp parallel for reduction(+ : sum) num_threads(2)
    for (int i = 0; i < n; i++) sum += i;
    return sum;
}

static pid_t start_worker(int region) {
    pid_t pid = fork();
    if (pid == 0) {
        int sum = region ? team_sum(100) : 4950;
        printf("child %d\n", sum);
        fflush(stdout);
        _exit(sum == 4950 ? 0 : 1);
    }
    return pid;
}

int main(int argc, char **argv) {
    int region = !(argc > 1 && !strcmp(argv[1], "none"));
    printf("parent %d\n", team_sum(10));
    fflush(stdout);
    pid_t pid = start_worker(region);
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid) return 1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
