/* The pod sandbox's process for the node tests' image: it holds the pod's namespaces and exits
 * on SIGTERM or SIGINT, as the kubelet's pause container does. */
#include <signal.h>
#include <unistd.h>

static void stop(int sig) {
    (void)sig;
    _exit(0);
}

int main(void) {
    signal(SIGTERM, stop);
    signal(SIGINT, stop);
    for (;;)
        pause();
}
