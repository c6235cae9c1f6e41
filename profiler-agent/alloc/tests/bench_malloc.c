/* A malloc-heavy loop: random small and medium sizes, a pool of live blocks replaced at random
 * (so frees are out of order), each block touched once. Prints nanoseconds per malloc+free pair.
 * Run once plain and once with the shim preloaded; the ratio is the shim's overhead. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { LIVE = 4096 };

int main(int argc, char **argv) {
    long ops = argc > 1 ? atol(argv[1]) : 5000000;
    static void *live[LIVE];
    uint64_t s = 88172645463325252ull;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long i = 0; i < ops; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        size_t size = (s & 3) ? 16 + (s >> 8) % 240 : 256 + (s >> 8) % 3800;
        unsigned k = (unsigned)(s >> 40) % LIVE;
        free(live[k]);
        live[k] = malloc(size);
        memset(live[k], (int)i, 16);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    for (int k = 0; k < LIVE; k++) free(live[k]);
    double ns = (double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec);
    printf("%.2f ns per malloc+free\n", ns / (double)ops);
    return 0;
}
