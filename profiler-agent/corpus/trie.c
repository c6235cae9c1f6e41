/* A pointer-heavy index: a digital search tree over 64-bit keys (each node holds one key and
 * two children, the branch at depth d taken by the key's d-th bit), built once from a pool of
 * nodes, then probed by lookups drawn with a popularity skew, a share of them for keys that
 * are absent. A hit reads the record the node names from a separate table of records. The top
 * levels are hot, the deep ones and the records cold.
 * Usage: trie [keys, thousands] [lookups, thousands]
 */
#include <stdlib.h>

#include "common.h"
#include "tmc_alloc.h"

typedef struct node {
    uint64_t key;
    uint32_t child[2]; /* 0: none (node 0 is the root, never a child) */
    uint32_t record;
    uint32_t pad;
} node;

typedef struct record {
    uint64_t hits;
    uint64_t payload[3];
} record;

static uint32_t find(const node *pool, uint64_t key) {
    uint32_t at = 0;
    for (int depth = 0; depth < 64; depth++) {
        if (pool[at].key == key) return at + 1;
        uint32_t next = pool[at].child[(key >> (63 - depth)) & 1];
        if (next == 0) return 0;
        at = next;
    }
    return 0;
}

int main(int argc, char **argv) {
    size_t keys = (argc > 1 ? (size_t)atol(argv[1]) : 400) * 1000;
    size_t lookups = (argc > 2 ? (size_t)atol(argv[2]) : 800) * 1000;
    if (keys == 0 || keys > UINT32_MAX) return 2; /* node indices are 32-bit, 0 means none */
    node *pool = TMC_CALLOC(keys, sizeof(node), "trie_nodes");
    record *records = TMC_CALLOC(keys, sizeof(record), "records");
    uint64_t *inserted = TMC_MALLOC(keys * sizeof(uint64_t), "key_list");
    if (!pool || !records || !inserted) return 1;
    size_t used = 1;
    pool[0].key = inserted[0] = next_random();
    for (size_t i = 1; i < keys; i++) {
        uint64_t key = next_random();
        inserted[i] = key;
        uint32_t at = 0;
        for (int depth = 0; depth < 64; depth++) {
            if (pool[at].key == key) break;
            uint32_t *slot = &pool[at].child[(key >> (63 - depth)) & 1];
            if (*slot == 0) {
                *slot = (uint32_t)used;
                pool[used].key = key;
                pool[used].record = (uint32_t)(next_random() % keys);
                records[pool[used].record].payload[0] = key;
                used++;
                break;
            }
            at = *slot;
        }
    }
    uint64_t checksum = 0;
    for (size_t q = 0; q < lookups; q++) {
        uint64_t u = next_random();
        uint64_t key;
        if (u % 8 == 0) {
            key = next_random(); /* absent, almost surely */
        } else {
            double x = (double)(u >> 11) / (double)(1ull << 53);
            key = inserted[(size_t)(x * x * x * (double)keys)];
        }
        uint32_t hit = find(pool, key);
        if (hit) {
            record *r = &records[pool[hit - 1].record];
            r->hits++;
            checksum += r->payload[0] & 0xff;
        }
    }
    report("trie", checksum + used);
    return 0;
}
