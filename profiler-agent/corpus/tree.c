/* A binary search tree (unbalanced, random keys): inserts, then lookups. Each lookup chases
 * pointers from the root; the top levels stay cached, the leaves miss.
 * Usage: tree [keys] [lookups]
 */
#include <stdlib.h>

#include "common.h"
#include "tmc_alloc.h"

typedef struct tnode {
    uint64_t key;
    struct tnode *left, *right;
    uint64_t payload[5];
} tnode;

int main(int argc, char **argv) {
    long keys = argc > 1 ? atol(argv[1]) : 200000;
    long lookups = argc > 2 ? atol(argv[2]) : 600000;
    tnode *pool = TMC_CALLOC((size_t)keys, sizeof(tnode), "tree_nodes");
    uint64_t *hits = TMC_CALLOC(4096, sizeof(uint64_t), "hit_histogram");
    if (!pool || !hits) return 1;
    tnode *root = NULL;
    for (long i = 0; i < keys; i++) {
        tnode *x = &pool[i];
        x->key = next_random() >> 16;
        x->payload[0] = (uint64_t)i;
        tnode **at = &root;
        while (*at) at = x->key < (*at)->key ? &(*at)->left : &(*at)->right;
        *at = x;
    }
    uint64_t found = 0;
    for (long i = 0; i < lookups; i++) {
        uint64_t key = pool[next_random() % (uint64_t)keys].key;
        tnode *p = root;
        int depth = 0;
        while (p && p->key != key) {
            p = key < p->key ? p->left : p->right;
            depth++;
        }
        if (p) found += p->payload[0];
        hits[depth & 4095]++;
    }
    report("tree", found + hits[10]);
    return 0;
}
