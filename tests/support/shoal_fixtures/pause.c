/* The sandbox ("pause") process of the test pod sandboxes: holds the pod's namespaces and does
 * nothing else. Sleeps until SIGTERM or SIGINT, then exits 0. Children are not reaped (the
 * sandboxes share no PID namespace with workload containers in these tests).
 * Built static (gcc -static -O2) by pause_image.py, so the image needs no libc. */
#include <signal.h>
#include <string.h>

static volatile sig_atomic_t stop;

static void on_signal(int sig) {
    (void)sig;
    stop = 1;
}

int main(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    /* As PID 1 of a PID namespace, signals without a handler are ignored: install one. */
    if (sigaction(SIGTERM, &sa, NULL) != 0 || sigaction(SIGINT, &sa, NULL) != 0)
        return 1;
    /* Block both signals between the check of `stop` and the wait, so none is lost. */
    sigset_t block, wait_mask;
    sigemptyset(&block);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGINT);
    if (sigprocmask(SIG_BLOCK, &block, &wait_mask) != 0)
        return 1;
    sigdelset(&wait_mask, SIGTERM);
    sigdelset(&wait_mask, SIGINT);
    while (!stop)
        sigsuspend(&wait_mask);
    return 0;
}
