/* Streaming: STREAM-like triad and copy over three large arrays, sequential and with plenty of
 * independent misses in flight.
 * Usage: stream [MiB per array] [passes]
 */
#include <stdlib.h>

#include "common.h"
#include "tmc_alloc.h"

int main(int argc, char **argv) {
    size_t mib = argc > 1 ? (size_t)atol(argv[1]) : 16;
    int passes = argc > 2 ? atoi(argv[2]) : 4;
    size_t n = mib * 1024 * 1024 / sizeof(double);
    double *a = TMC_MALLOC(n * sizeof(double), "array_a");
    double *b = TMC_MALLOC(n * sizeof(double), "array_b");
    double *c = TMC_MALLOC(n * sizeof(double), "array_c");
    if (!a || !b || !c) return 1;
    for (size_t i = 0; i < n; i++) {
        a[i] = 1.0;
        b[i] = 2.0;
        c[i] = 0.0;
    }
    for (int p = 0; p < passes; p++) {
        for (size_t i = 0; i < n; i++) a[i] = b[i] + 3.0 * c[i];
        for (size_t i = 0; i < n; i++) c[i] = a[i];
    }
    double sum = 0.0;
    for (size_t i = 0; i < n; i += 4096) sum += a[i] + c[i];
    report("stream", (uint64_t)sum);
    return 0;
}
