/* An LRU cache in front of a slower store: a hash index of node numbers, a pool of nodes kept
 * in recency order on a doubly linked list, and each node's 64-byte value in a separate value
 * area. Keys are drawn with a popularity skew from a key space twice the cache's capacity: a
 * hit moves its node to the front (writes to three nodes' links), a miss evicts the least
 * recently used node, unlinks it from its hash chain and writes the new value over its slot.
 * Usage: lrucache [capacity, thousands] [requests, thousands]
 */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "tmc_alloc.h"

typedef struct entry {
    uint64_t key;
    uint32_t prev, next; /* recency list */
    uint32_t chain;      /* next in the hash bucket */
    uint32_t pad;
} entry;

enum { NIL = 0xffffffffu, VALUE = 64 };

int main(int argc, char **argv) {
    size_t capacity = (argc > 1 ? (size_t)atol(argv[1]) : 160) * 1000;
    size_t requests = (argc > 2 ? (size_t)atol(argv[2]) : 800) * 1000;
    size_t buckets = 1;
    while (buckets < capacity) buckets <<= 1;
    uint32_t *index = TMC_MALLOC(buckets * sizeof(uint32_t), "hash_index");
    entry *nodes = TMC_MALLOC(capacity * sizeof(entry), "lru_nodes");
    unsigned char *values = TMC_MALLOC(capacity * VALUE, "values");
    if (!index || !nodes || !values) return 1;
    memset(index, 0xff, buckets * sizeof(uint32_t));
    uint32_t head = NIL, tail = NIL;
    size_t used = 0;
    uint64_t hits = 0, checksum = 0;
    for (size_t r = 0; r < requests; r++) {
        double x = (double)(next_random() >> 11) / (double)(1ull << 53);
        uint64_t key = (uint64_t)(x * x * (double)(2 * capacity)) * 0x9E3779B97F4A7C15ull + 1;
        size_t b = (size_t)(key >> 17) & (buckets - 1);
        uint32_t n = index[b];
        while (n != NIL && nodes[n].key != key) n = nodes[n].chain;
        if (n != NIL) {
            hits++;
            checksum += values[(size_t)n * VALUE + (key & 63)];
            if (n == head) continue;
            /* unlink, then to the front */
            nodes[nodes[n].prev].next = nodes[n].next;
            if (nodes[n].next != NIL) nodes[nodes[n].next].prev = nodes[n].prev;
            else tail = nodes[n].prev;
        } else {
            if (used < capacity) {
                n = (uint32_t)used++;
            } else {
                n = tail; /* evict the least recently used */
                tail = nodes[n].prev;
                nodes[tail].next = NIL;
                size_t old = (size_t)(nodes[n].key >> 17) & (buckets - 1);
                uint32_t *link = &index[old];
                while (*link != n) link = &nodes[*link].chain;
                *link = nodes[n].chain;
            }
            nodes[n].key = key;
            nodes[n].chain = index[b];
            index[b] = n;
            memset(values + (size_t)n * VALUE, (int)(key & 0xff), VALUE);
            if (tail == NIL) tail = n;
        }
        nodes[n].prev = NIL;
        nodes[n].next = head;
        if (head != NIL) nodes[head].prev = n;
        head = n;
    }
    report("lrucache", hits * 1000003 + checksum);
    return 0;
}
