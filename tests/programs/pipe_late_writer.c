/* A parent blocks reading a pipe that its child fills after sleeping SECONDS (default 8),
 * then reaps the child and exits 0. The parent's read waits on the tree, but the child's
 * sleep is timed: not a deadlock. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
    int seconds = argc > 1 ? atoi(argv[1]) : 8;
    int fds[2];
    if (pipe(fds) != 0) {
        perror("pipe");
        return 1;
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        struct timespec ts = {seconds, 0};
        while (nanosleep(&ts, &ts) != 0) {
        }
        ssize_t n = write(fds[1], "ready\n", 6);
        _exit(n == 6 ? 0 : 1);
    }
    close(fds[1]);
    char line[64];
    ssize_t n = read(fds[0], line, sizeof(line));
    int status = 0;
    waitpid(pid, &status, 0);
    printf("child said %.*s", (int)(n > 0 ? n : 0), line);
    return n == 6 && WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
