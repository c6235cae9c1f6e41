/* A hash join (build a chained hash table on R, probe it with S), tagged.
 *
 * Structures: the build relation R (streamed once), the bucket array (random reads: hot), the
 * chain nodes (reached through the bucket pointer: dependent), the probe relation S (streamed),
 * and the output buffer (appended).
 * Usage: hashjoin [build tuples] [probe tuples]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "tmc_alloc.h"

struct tuple {
    uint32_t key, payload;
};
struct node {
    uint32_t key, payload;
    struct node *next;
};

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static inline uint64_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

int main(int argc, char **argv) {
    uint32_t nr = argc > 1 ? (uint32_t)atoi(argv[1]) : 40000;
    uint32_t ns = argc > 2 ? (uint32_t)atoi(argv[2]) : 120000;
    uint32_t nb = 1;
    while (nb < nr) nb <<= 1;

    struct tuple *r = TMC_MALLOC(nr * sizeof *r, "build_relation");
    struct tuple *s = TMC_MALLOC(ns * sizeof *s, "probe_relation");
    struct node **buckets = TMC_CALLOC(nb, sizeof *buckets, "hash_buckets");
    struct node *nodes = TMC_MALLOC(nr * sizeof *nodes, "hash_chains");
    uint64_t *out = TMC_MALLOC(ns * sizeof *out, "join_output");
    if (!r || !s || !buckets || !nodes || !out) return 1;
    for (uint32_t i = 0; i < nr; i++) r[i] = (struct tuple){(uint32_t)next() % (4 * nr), i};
    for (uint32_t i = 0; i < ns; i++) s[i] = (struct tuple){(uint32_t)next() % (4 * nr), i};

    for (uint32_t i = 0; i < nr; i++) {
        uint32_t h = (r[i].key * 2654435761u) & (nb - 1);
        nodes[i] = (struct node){r[i].key, r[i].payload, buckets[h]};
        buckets[h] = &nodes[i];
    }
    uint64_t matches = 0;
    for (uint32_t i = 0; i < ns; i++) {
        uint32_t h = (s[i].key * 2654435761u) & (nb - 1);
        for (struct node *n = buckets[h]; n; n = n->next)
            if (n->key == s[i].key) out[matches++] = (uint64_t)n->payload << 32 | s[i].payload;
    }
    printf("hashjoin: %u x %u tuples, %llu matches\n", nr, ns, (unsigned long long)matches);
    TMC_FREE(r);
    TMC_FREE(s);
    TMC_FREE(buckets);
    TMC_FREE(nodes);
    TMC_FREE(out);
    return 0;
}
