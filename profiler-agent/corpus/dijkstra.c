/* Shortest paths with a priority queue: Dijkstra's algorithm on a random weighted graph in CSR
 * form, a binary min-heap of (distance, vertex) with lazy deletion. The heap's top levels and
 * the distance array are hot and randomly accessed; the adjacency is read a vertex's run at a
 * time; the generator's edge list is kept allocated and cold after the build.
 * Usage: dijkstra [log2 vertices] [edges per vertex] [searches]
 */
#include <stdlib.h>

#include "common.h"
#include "tmc_alloc.h"

typedef struct {
    uint32_t dist, vertex;
} item;

static item *heap;
static size_t heap_size;

static void push(uint32_t dist, uint32_t vertex) {
    size_t i = heap_size++;
    while (i > 0 && heap[(i - 1) / 2].dist > dist) {
        heap[i] = heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    heap[i] = (item){dist, vertex};
}

static item pop(void) {
    item top = heap[0], last = heap[--heap_size];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= heap_size) break;
        if (c + 1 < heap_size && heap[c + 1].dist < heap[c].dist) c++;
        if (heap[c].dist >= last.dist) break;
        heap[i] = heap[c];
        i = c;
    }
    if (heap_size) heap[i] = last;
    return top;
}

int main(int argc, char **argv) {
    int scale = argc > 1 ? atoi(argv[1]) : 16;
    int degree = argc > 2 ? atoi(argv[2]) : 8;
    int searches = argc > 3 ? atoi(argv[3]) : 2;
    uint32_t n = 1u << scale;
    uint64_t m = (uint64_t)n * (uint64_t)degree;
    uint32_t *edges = TMC_MALLOC(3 * m * sizeof(uint32_t), "edge_list");
    uint32_t *offsets = TMC_CALLOC(n + 1, sizeof(uint32_t), "csr_offsets");
    uint32_t *adj = TMC_MALLOC(m * sizeof(uint32_t), "csr_targets");
    uint32_t *weight = TMC_MALLOC(m * sizeof(uint32_t), "csr_weights");
    uint32_t *dist = TMC_MALLOC(n * sizeof(uint32_t), "distances");
    heap = TMC_MALLOC((m + 1) * sizeof(item), "priority_queue");
    if (!edges || !offsets || !adj || !weight || !dist || !heap) return 1;
    for (uint64_t e = 0; e < m; e++) {
        uint64_t r = next_random();
        uint32_t u = (uint32_t)(r % n);
        edges[3 * e] = u;
        edges[3 * e + 1] = (uint32_t)((r >> 32) % n);
        edges[3 * e + 2] = 1 + (uint32_t)(next_random() % 100);
        offsets[u + 1]++;
    }
    for (uint32_t i = 0; i < n; i++) offsets[i + 1] += offsets[i];
    uint32_t *fill = TMC_MALLOC(n * sizeof(uint32_t), "csr_fill");
    if (!fill) return 1;
    for (uint32_t i = 0; i < n; i++) fill[i] = offsets[i];
    for (uint64_t e = 0; e < m; e++) {
        uint32_t at = fill[edges[3 * e]]++;
        adj[at] = edges[3 * e + 1];
        weight[at] = edges[3 * e + 2];
    }
    TMC_FREE(fill);
    uint64_t total = 0;
    for (int s = 0; s < searches; s++) {
        for (uint32_t i = 0; i < n; i++) dist[i] = UINT32_MAX;
        uint32_t source = (uint32_t)(next_random() % n);
        dist[source] = 0;
        heap_size = 0;
        push(0, source);
        while (heap_size) {
            item top = pop();
            if (top.dist != dist[top.vertex]) continue; /* a stale entry */
            for (uint32_t k = offsets[top.vertex]; k < offsets[top.vertex + 1]; k++) {
                uint32_t v = adj[k], d = top.dist + weight[k];
                if (d < dist[v]) {
                    dist[v] = d;
                    push(d, v);
                }
            }
        }
        for (uint32_t i = 0; i < n; i += 64) total += dist[i] == UINT32_MAX ? 0 : dist[i];
    }
    report("dijkstra", total);
    return 0;
}
