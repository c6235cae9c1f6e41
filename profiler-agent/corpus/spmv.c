/* Sparse matrix times vector, repeated (an iterative solver's inner loop): the matrix in CSR
 * form (row offsets, column indices, values) is read once per iteration from start to end,
 * while the source vector is gathered at the column indices, a few neighbours around the
 * diagonal and a few anywhere. The matrix is large and streamed; the vector is a fraction of it
 * and read at random.
 * Production size: 16Gi
 * Usage: spmv [rows, thousands] [nonzeros per row] [iterations]
 */
#include <stdlib.h>

#include "common.h"
#include "tmc_alloc.h"

int main(int argc, char **argv) {
    size_t rows = (argc > 1 ? (size_t)atol(argv[1]) : 200) * 1000;
    size_t per_row = argc > 2 ? (size_t)atol(argv[2]) : 12;
    int iterations = argc > 3 ? atoi(argv[3]) : 3;
    size_t nonzeros = rows * per_row;
    uint64_t *offsets = TMC_MALLOC((rows + 1) * sizeof(uint64_t), "row_offsets");
    uint32_t *columns = TMC_MALLOC(nonzeros * sizeof(uint32_t), "column_indices");
    double *values = TMC_MALLOC(nonzeros * sizeof(double), "matrix_values");
    double *x = TMC_MALLOC(rows * sizeof(double), "source_vector");
    double *y = TMC_MALLOC(rows * sizeof(double), "result_vector");
    if (!offsets || !columns || !values || !x || !y) return 1;
    for (size_t r = 0; r < rows; r++) {
        offsets[r] = r * per_row;
        x[r] = 1.0 / (double)(r + 1);
        for (size_t k = 0; k < per_row; k++) {
            size_t at = r * per_row + k;
            uint64_t u = next_random();
            /* Two thirds of a row's entries near the diagonal, the rest anywhere. */
            size_t c = (u % 3) ? (r + rows + (u >> 8) % 64 - 32) % rows : (u >> 8) % rows;
            columns[at] = (uint32_t)c;
            values[at] = (double)(u % 1000) / 1000.0;
        }
    }
    offsets[rows] = nonzeros;
    double sum = 0;
    for (int it = 0; it < iterations; it++) {
        for (size_t r = 0; r < rows; r++) {
            double acc = 0;
            for (uint64_t k = offsets[r]; k < offsets[r + 1]; k++) acc += values[k] * x[columns[k]];
            y[r] = acc;
        }
        /* The result becomes the next source, scaled, as a power iteration does. */
        double *t = x;
        x = y;
        y = t;
        sum += x[it % rows];
    }
    report("spmv", (uint64_t)(sum * 1e6));
    return 0;
}
