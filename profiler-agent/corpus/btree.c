/* A B+-tree index over a table of rows: wide inner nodes, leaves linked in key order, each leaf
 * entry pointing at its row. Built bottom-up from sorted keys, then queried: most queries look
 * one key up (inner nodes, a leaf, then the row); one in eight scans a short range through the
 * leaves alone (the index covers it, no row is read). The inner levels are few and hot, the
 * leaves are read once a query, the rows are large and read at random.
 * Usage: btree [rows] [queries]
 */
#include <stdlib.h>

#include "common.h"
#include "tmc_alloc.h"

#define FANOUT 32
#define ROW_WORDS 16 /* 128-byte rows */
#define SCAN_LEAVES 4

typedef struct leaf {
    uint64_t keys[FANOUT];
    uint64_t *rows[FANOUT];
    struct leaf *next;
    int count;
} leaf;

typedef struct inner {
    uint64_t keys[FANOUT]; /* keys[i]: the smallest key under child i + 1 */
    void *child[FANOUT + 1];
    int count; /* children */
} inner;

/* The child of `n` whose keys may hold `key`. */
static void *descend(const inner *n, uint64_t key) {
    int lo = 0, hi = n->count - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (key >= n->keys[mid - 1]) lo = mid;
        else hi = mid - 1;
    }
    return n->child[lo];
}

int main(int argc, char **argv) {
    long rows = argc > 1 ? atol(argv[1]) : 300000;
    long queries = argc > 2 ? atol(argv[2]) : 600000;
    if (rows < FANOUT) rows = FANOUT;
    long leaves = (rows + FANOUT - 1) / FANOUT;
    long inners = 0; /* the inner nodes the build below makes, level by level */
    for (long w = leaves; w > 1; w = (w + FANOUT) / (FANOUT + 1)) inners += (w + FANOUT) / (FANOUT + 1);
    if (inners == 0) inners = 1; /* a tag of no bytes is no structure */
    uint64_t *table = TMC_CALLOC((size_t)rows, ROW_WORDS * sizeof(uint64_t), "rows");
    leaf *leafs = TMC_CALLOC((size_t)leaves, sizeof(leaf), "btree_leaves");
    inner *nodes = TMC_CALLOC((size_t)inners, sizeof(inner), "btree_inner");
    if (!table || !leafs || !nodes) return 1;

    /* Sorted keys with gaps, rows in a shuffled order so that neighbouring keys live far apart
     * in the table, as rows inserted over time do. */
    uint64_t key = 0;
    for (long i = 0; i < rows; i++) {
        key += 1 + next_random() % 7;
        long slot = (long)((uint64_t)i * 2654435761u % (uint64_t)rows);
        uint64_t *row = table + slot * ROW_WORDS;
        row[0] = key;
        row[1] = (uint64_t)i;
        leaf *l = &leafs[i / FANOUT];
        l->keys[l->count] = key;
        l->rows[l->count] = row;
        l->count++;
    }
    for (long i = 0; i + 1 < leaves; i++) leafs[i].next = &leafs[i + 1];
    uint64_t max_key = key;

    /* Inner levels bottom-up: FANOUT children a node, each separated by its first key. */
    void **level = malloc((size_t)leaves * sizeof(void *));
    uint64_t *firsts = malloc((size_t)leaves * sizeof(uint64_t));
    if (!level || !firsts) return 1;
    long width = leaves, used = 0;
    for (long i = 0; i < leaves; i++) {
        level[i] = &leafs[i];
        firsts[i] = leafs[i].keys[0];
    }
    while (width > 1) {
        long parents = (width + FANOUT) / (FANOUT + 1);
        for (long p = 0; p < parents; p++) {
            inner *n = &nodes[used++];
            long from = p * (FANOUT + 1), to = from + FANOUT + 1 < width ? from + FANOUT + 1 : width;
            for (long c = from; c < to; c++) {
                n->child[c - from] = level[c];
                if (c > from) n->keys[c - from - 1] = firsts[c];
            }
            n->count = (int)(to - from);
            uint64_t first = firsts[from];
            level[p] = n;
            firsts[p] = first;
        }
        width = parents;
    }
    void *root = level[0];
    int height = 0;
    for (long w = leaves; w > 1; w = (w + FANOUT) / (FANOUT + 1)) height++;
    free(level);
    free(firsts);

    uint64_t sum = 0;
    for (long q = 0; q < queries; q++) {
        uint64_t want = 1 + next_random() % max_key;
        void *at = root;
        for (int h = 0; h < height; h++) at = descend((const inner *)at, want);
        leaf *l = (leaf *)at;
        int i = 0;
        while (i < l->count - 1 && l->keys[i + 1] <= want) i++;
        if ((q & 7) == 7) {
            /* A short range scan, answered by the leaves. */
            for (int s = 0; s < SCAN_LEAVES && l; s++, l = l->next)
                for (int j = 0; j < l->count; j++) sum += l->keys[j] & 0xff;
        } else {
            uint64_t *row = l->rows[i];
            sum += row[1] + row[ROW_WORDS - 1];
            row[ROW_WORDS - 1] = sum & 0xffff; /* a column updated in place */
        }
    }
    report("btree", sum + (uint64_t)used);
    return 0;
}
