/* Counting words: a large text buffer (generated once: words drawn from a vocabulary with a
 * popularity skew) is scanned in order, each word hashed and counted in a chained hash table
 * whose nodes hold the word; the vocabulary's strings sit in a separate arena the table points
 * into. The text streams; the table's buckets and the popular words' nodes are hot.
 * Usage: wordcount [text MiB] [vocabulary, thousands]
 */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "tmc_alloc.h"

typedef struct node {
    const char *word;
    uint32_t length;
    uint32_t count;
    struct node *next;
} node;

static uint64_t hash(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

int main(int argc, char **argv) {
    size_t text_bytes = (argc > 1 ? (size_t)atol(argv[1]) : 24) * 1024 * 1024;
    size_t vocabulary = (argc > 2 ? (size_t)atol(argv[2]) : 200) * 1000;
    char *arena = TMC_MALLOC(vocabulary * 16, "vocabulary_arena");
    uint32_t *lengths = TMC_MALLOC(vocabulary * sizeof(uint32_t), "vocabulary_lengths");
    char *text = TMC_MALLOC(text_bytes + 16, "text");
    size_t buckets = 1;
    while (buckets < vocabulary) buckets <<= 1;
    node **table = TMC_CALLOC(buckets, sizeof(node *), "hash_buckets");
    node *nodes = TMC_MALLOC(vocabulary * sizeof(node), "word_nodes");
    if (!arena || !lengths || !text || !table || !nodes) return 1;
    for (size_t w = 0; w < vocabulary; w++) {
        uint64_t u = next_random();
        uint32_t len = 3 + (uint32_t)(u % 10);
        for (uint32_t c = 0; c < len; c++) arena[w * 16 + c] = (char)('a' + (u >> (5 * (c % 12))) % 26);
        lengths[w] = len;
    }
    size_t at = 0;
    while (at + 14 < text_bytes) {
        double x = (double)(next_random() >> 11) / (double)(1ull << 53);
        size_t w = (size_t)(x * x * x * (double)vocabulary);
        memcpy(text + at, arena + w * 16, lengths[w]);
        at += lengths[w];
        text[at++] = ' ';
    }
    text[at] = 0;
    size_t used = 0, distinct = 0;
    uint64_t words = 0;
    for (size_t i = 0; i < at;) {
        size_t start = i;
        while (i < at && text[i] != ' ') i++;
        size_t len = i - start;
        i++;
        if (len == 0) continue;
        words++;
        node **slot = &table[hash(text + start, len) & (buckets - 1)];
        node *n = *slot;
        while (n && !(n->length == len && memcmp(n->word, text + start, len) == 0)) n = n->next;
        if (!n) {
            n = &nodes[used++];
            n->word = text + start; /* the first occurrence names it */
            n->length = (uint32_t)len;
            n->count = 0;
            n->next = *slot;
            *slot = n;
            distinct++;
        }
        n->count++;
    }
    report("wordcount", words * 1000003 + distinct);
    return 0;
}
