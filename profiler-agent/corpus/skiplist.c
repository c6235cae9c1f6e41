/* An ordered index as a skip list: nodes of random height, each with a key, a pointer to its
 * value and a tower of forward pointers, built by inserting shuffled keys; then queried with
 * lookups that walk down from the top level (a dependent pointer chase; the few tall nodes are
 * visited by every query, the short ones rarely), reading the value of each key found. The
 * values are kept apart from the nodes, as an index over a table keeps its rows.
 * Usage: skiplist [keys] [lookups]
 */
#include <stdlib.h>

#include "common.h"
#include "tmc_alloc.h"

#define MAX_LEVEL 20
#define VALUE_WORDS 8 /* 64-byte values */

typedef struct node {
    uint64_t key;
    uint64_t *value;
    int height;
    struct node *next[MAX_LEVEL];
} node;

int main(int argc, char **argv) {
    size_t keys = argc > 1 ? (size_t)atol(argv[1]) : 200000;
    size_t lookups = argc > 2 ? (size_t)atol(argv[2]) : 400000;
    node *nodes = TMC_MALLOC(keys * sizeof(node), "skiplist_nodes");
    uint64_t *values = TMC_MALLOC(keys * VALUE_WORDS * sizeof(uint64_t), "values");
    size_t *order = TMC_MALLOC(keys * sizeof(size_t), "insert_order");
    node *head = TMC_CALLOC(1, sizeof(node), "skiplist_head");
    if (!nodes || !values || !order || !head) return 1;
    head->height = MAX_LEVEL;
    for (size_t i = 0; i < keys; i++) order[i] = i;
    for (size_t i = keys - 1; i > 0; i--) {
        size_t j = (size_t)(next_random() % (i + 1));
        size_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    for (size_t k = 0; k < keys; k++) {
        size_t i = order[k];
        node *n = &nodes[k];
        n->key = 2 * i + 1;
        n->value = values + i * VALUE_WORDS;
        for (int w = 0; w < VALUE_WORDS; w++) n->value[w] = i + (uint64_t)w;
        n->height = 1;
        while (n->height < MAX_LEVEL && (next_random() & 3) == 0) n->height++;
        node *at = head;
        for (int level = MAX_LEVEL - 1; level >= 0; level--) {
            while (at->next[level] && at->next[level]->key < n->key) at = at->next[level];
            if (level < n->height) {
                n->next[level] = at->next[level];
                at->next[level] = n;
            }
        }
    }
    uint64_t sum = 0;
    for (size_t q = 0; q < lookups; q++) {
        uint64_t key = 2 * (next_random() % keys) + 1;
        node *at = head;
        for (int level = MAX_LEVEL - 1; level >= 0; level--)
            while (at->next[level] && at->next[level]->key < key) at = at->next[level];
        at = at->next[0];
        if (at && at->key == key) sum += at->value[q % VALUE_WORDS];
    }
    report("skiplist", sum);
    return 0;
}
