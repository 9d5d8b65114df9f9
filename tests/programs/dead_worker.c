/* A parent forks a worker and waits for its answer on a pipe, but keeps the pipe's write
 * end open itself (the classic mistake). The worker dies by SIGKILL before it answers, so
 * the parent's read() never sees EOF: it waits forever for a dead worker. The
 * "dead-worker" shape. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

static void worker(int fd) {
    (void)fd;
    printf("worker %d starting\n", (int)getpid());
    fflush(stdout);
    usleep(300 * 1000);
    raise(SIGKILL); /* dies before writing its answer */
}

static int wait_for_answer(int fd) {
    char answer[16];
    return (int)read(fd, answer, sizeof answer); /* blocks forever: we hold the write end */
}

int main(void) {
    int fds[2];
    if (pipe(fds) != 0)
        return 1;
    pid_t pid = fork();
    if (pid == 0) {
        worker(fds[1]);
        return 0;
    }
    printf("parent %d waits for worker %d\n", (int)getpid(), (int)pid);
    fflush(stdout);
    return wait_for_answer(fds[0]) > 0 ? 0 : 2;
}
