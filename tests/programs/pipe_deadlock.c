/* A parent forks a child, then waits for it; the child reads a line from a pipe that the
 * parent was to write but never does. Both still hold the pipe's write end (neither closed
 * it), so the read never sees end-of-file: the child blocks on a pipe written only by the
 * tree, the parent on its child. */
#define _GNU_SOURCE
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

int main(void) {
    int fds[2];
    if (pipe(fds) != 0) {
        perror("pipe");
        return 1;
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        char line[64];
        ssize_t n = read(fds[0], line, sizeof(line)); /* never returns: no one writes */
        _exit(n > 0 ? 0 : 1);
    }
    printf("child %d waits for its orders\n", (int)pid);
    fflush(stdout);
    int status = 0;
    waitpid(pid, &status, 0);
    return 0;
}
