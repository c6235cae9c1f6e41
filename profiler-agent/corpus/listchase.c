/* Pointer chasing: a singly linked list whose nodes are shuffled over memory, walked end to
 * end several times (each miss waits for the one before), next to a small array of per-walk
 * results.
 * Usage: listchase [list MiB] [walks]
 */
#include <stdlib.h>

#include "common.h"
#include "tmc_alloc.h"

typedef struct node {
    struct node *next;
    uint64_t value;
    uint64_t pad[6]; /* one node per cache line */
} node;

int main(int argc, char **argv) {
    size_t mib = argc > 1 ? (size_t)atol(argv[1]) : 6;
    int walks = argc > 2 ? atoi(argv[2]) : 3;
    size_t n = mib * 1024 * 1024 / sizeof(node);
    node *nodes = TMC_MALLOC(n * sizeof(node), "list_nodes");
    uint32_t *order = TMC_MALLOC(n * sizeof(uint32_t), "shuffle_order");
    uint64_t *results = TMC_CALLOC(1024, sizeof(uint64_t), "walk_results");
    if (!nodes || !order || !results) return 1;
    for (size_t i = 0; i < n; i++) order[i] = (uint32_t)i;
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = (size_t)(next_random() % (i + 1));
        uint32_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    for (size_t i = 0; i < n; i++) {
        nodes[order[i]].next = i + 1 < n ? &nodes[order[i + 1]] : NULL;
        nodes[order[i]].value = i;
    }
    for (int w = 0; w < walks; w++) {
        uint64_t sum = 0;
        for (node *p = &nodes[order[0]]; p; p = p->next) sum += p->value;
        results[w % 1024] = sum;
    }
    report("listchase", results[0] + results[walks - 1]);
    return 0;
}
