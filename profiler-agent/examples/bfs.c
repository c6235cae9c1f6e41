/* Breadth-first search on a generated power-law-ish graph (Graph500-like, small), tagged.
 *
 * Structures: the CSR offsets and adjacency (streamed per vertex), the parent array (random
 * accesses at edge targets: the hot one), the frontier queue (streamed), and the generator's edge
 * list (written once, read to build CSR, then cold: kept allocated like Graph500's validation).
 * Usage: bfs [log2 vertices] [edges per vertex] [searches]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "tmc_alloc.h"

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static inline uint64_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

int main(int argc, char **argv) {
    int scale = argc > 1 ? atoi(argv[1]) : 16;
    int degree = argc > 2 ? atoi(argv[2]) : 8;
    int searches = argc > 3 ? atoi(argv[3]) : 2;
    uint32_t n = 1u << scale;
    uint64_t m = (uint64_t)n * (uint64_t)degree;

    uint32_t *edges = TMC_MALLOC(2 * m * sizeof(uint32_t), "edge_list");
    uint32_t *offsets = TMC_CALLOC(n + 1, sizeof(uint32_t), "csr_offsets");
    uint32_t *adj = TMC_MALLOC(m * sizeof(uint32_t), "csr_adjacency");
    int32_t *parent = TMC_MALLOC(n * sizeof(int32_t), "bfs_parent");
    uint32_t *queue = TMC_MALLOC(n * sizeof(uint32_t), "bfs_queue");
    if (!edges || !offsets || !adj || !parent || !queue) return 1;

    /* Skewed endpoints: a vertex id with its low bits squared away favours small ids. */
    for (uint64_t e = 0; e < m; e++) {
        uint64_t r = next();
        uint32_t u = (uint32_t)(r % n), v = (uint32_t)((r >> 32) % n);
        v = (uint32_t)(((uint64_t)v * v) >> scale);
        edges[2 * e] = u;
        edges[2 * e + 1] = v;
        offsets[u + 1]++;
    }
    for (uint32_t i = 0; i < n; i++) offsets[i + 1] += offsets[i];
    uint32_t *fill = TMC_MALLOC(n * sizeof(uint32_t), "csr_fill");
    for (uint32_t i = 0; i < n; i++) fill[i] = offsets[i];
    for (uint64_t e = 0; e < m; e++) adj[fill[edges[2 * e]]++] = edges[2 * e + 1];
    TMC_FREE(fill);

    uint64_t reached = 0;
    for (int s = 0; s < searches; s++) {
        for (uint32_t i = 0; i < n; i++) parent[i] = -1;
        uint32_t root = (uint32_t)(next() % n), head = 0, tail = 0;
        parent[root] = (int32_t)root;
        queue[tail++] = root;
        while (head < tail) {
            uint32_t u = queue[head++];
            for (uint32_t k = offsets[u]; k < offsets[u + 1]; k++) {
                uint32_t v = adj[k];
                if (parent[v] < 0) {
                    parent[v] = (int32_t)u;
                    queue[tail++] = v;
                }
            }
        }
        reached += tail;
    }
    printf("bfs: %u vertices, %llu edges, %d searches, %llu reached\n", n, (unsigned long long)m,
           searches, (unsigned long long)reached);
    TMC_FREE(edges);
    TMC_FREE(offsets);
    TMC_FREE(adj);
    TMC_FREE(parent);
    TMC_FREE(queue);
    return 0;
}
