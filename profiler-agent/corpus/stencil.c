/* A stencil: 5-point Jacobi sweeps over a 2-D grid of doubles, two grids swapped each sweep
 * (every row is read from three neighbouring rows, so a few rows in the LLC serve every point),
 * a read-only coefficient grid beside them, and a ring of checkpoints written every few sweeps
 * and never read back (cold, like a solver's snapshots kept for restart).
 * Production size: 16Gi
 * Usage: stencil [MiB per grid] [sweeps]
 */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "tmc_alloc.h"

int main(int argc, char **argv) {
    size_t mib = argc > 1 ? (size_t)atol(argv[1]) : 4;
    int sweeps = argc > 2 ? atoi(argv[2]) : 6;
    size_t side = 1;
    while ((side + 1) * (side + 1) * sizeof(double) <= mib * 1024 * 1024) side++;
    size_t n = side * side, checkpoints = 4;
    double *a = TMC_MALLOC(n * sizeof(double), "grid_current");
    double *b = TMC_MALLOC(n * sizeof(double), "grid_next");
    double *coef = TMC_MALLOC(n * sizeof(double), "coefficients");
    double *ring = TMC_MALLOC(checkpoints * n * sizeof(double), "checkpoints");
    if (!a || !b || !coef || !ring) return 1;
    for (size_t i = 0; i < n; i++) {
        a[i] = (double)(next_random() & 0xff);
        b[i] = 0.0;
        coef[i] = 0.2 + (double)(i % 7) * 0.01;
    }
    for (int s = 0; s < sweeps; s++) {
        for (size_t y = 1; y + 1 < side; y++) {
            const double *up = a + (y - 1) * side, *row = a + y * side, *down = a + (y + 1) * side;
            const double *c = coef + y * side;
            double *out = b + y * side;
            for (size_t x = 1; x + 1 < side; x++)
                out[x] = c[x] * (row[x] + row[x - 1] + row[x + 1] + up[x] + down[x]);
        }
        double *t = a;
        a = b;
        b = t;
        if (s % 2 == 1) {
            size_t slot = (size_t)(s / 2) % checkpoints;
            memcpy(ring + slot * n, a, n * sizeof(double));
        }
    }
    double sum = 0.0;
    for (size_t i = 0; i < n; i += 512) sum += a[i];
    report("stencil", (uint64_t)sum);
    return 0;
}
