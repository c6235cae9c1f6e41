/* PageRank by pulling: each iteration streams every vertex's in-edges (CSR offsets and source
 * indices) and gathers the sources' contributions, reading them where the edges point (a
 * power-law choice of sources makes a few of them hot), then writes the new ranks and the next
 * contributions in order. The edge list the graph was built from stays allocated, cold.
 * Usage: pagerank [vertices, thousands] [in-edges per vertex] [iterations]
 */
#include <stdlib.h>

#include "common.h"
#include "tmc_alloc.h"

int main(int argc, char **argv) {
    size_t v = (argc > 1 ? (size_t)atol(argv[1]) : 200) * 1000;
    size_t degree = argc > 2 ? (size_t)atol(argv[2]) : 8;
    int iterations = argc > 3 ? atoi(argv[3]) : 4;
    size_t m = v * degree;
    uint32_t *edges = TMC_MALLOC(2 * m * sizeof(uint32_t), "edge_list");
    uint32_t *offsets = TMC_MALLOC((v + 1) * sizeof(uint32_t), "in_offsets");
    uint32_t *sources = TMC_MALLOC(m * sizeof(uint32_t), "in_sources");
    uint32_t *out_degree = TMC_CALLOC(v, sizeof(uint32_t), "out_degree");
    double *rank = TMC_MALLOC(v * sizeof(double), "rank");
    double *contribution = TMC_MALLOC(v * sizeof(double), "contribution");
    if (!edges || !offsets || !sources || !out_degree || !rank || !contribution) return 1;
    for (size_t e = 0; e < m; e++) {
        double x = (double)(next_random() >> 11) / (double)(1ull << 53);
        uint32_t from = (uint32_t)(x * x * (double)v); /* sources skewed to low ids */
        edges[2 * e] = from;
        edges[2 * e + 1] = (uint32_t)(e / degree); /* every vertex has `degree` in-edges */
        out_degree[from]++;
    }
    for (size_t i = 0; i <= v; i++) offsets[i] = (uint32_t)(i * degree);
    for (size_t e = 0; e < m; e++) sources[e] = edges[2 * e];
    for (size_t i = 0; i < v; i++) {
        rank[i] = 1.0 / (double)v;
        contribution[i] = out_degree[i] ? rank[i] / out_degree[i] : 0.0;
    }
    const double damping = 0.85, base = (1.0 - damping) / (double)v;
    for (int it = 0; it < iterations; it++) {
        for (size_t i = 0; i < v; i++) {
            double sum = 0.0;
            for (uint32_t e = offsets[i]; e < offsets[i + 1]; e++) sum += contribution[sources[e]];
            rank[i] = base + damping * sum;
        }
        for (size_t i = 0; i < v; i++) contribution[i] = out_degree[i] ? rank[i] / out_degree[i] : 0.0;
    }
    double total = 0.0;
    for (size_t i = 0; i < v; i++) total += rank[i];
    report("pagerank", (uint64_t)(total * 1e9));
    return 0;
}
