/* Sorting records by a 32-bit key with a least-significant-digit radix sort: each of four
 * passes reads the source array in order and scatters every record to its digit's bucket in the
 * destination, then the two arrays swap. Half the misses are stores spread over 256 write
 * streams; a small histogram table is hot. A lookup table of key prefixes, built once and read
 * by a final verification pass, sits beside them.
 * Usage: radixsort [records, thousands]
 */
#include <stdlib.h>

#include "common.h"
#include "tmc_alloc.h"

typedef struct {
    uint32_t key;
    uint32_t payload[3];
} record;

int main(int argc, char **argv) {
    size_t n = (argc > 1 ? (size_t)atol(argv[1]) : 600) * 1000;
    record *src = TMC_MALLOC(n * sizeof(record), "records");
    record *dst = TMC_MALLOC(n * sizeof(record), "scatter_buffer");
    size_t *count = TMC_CALLOC(256, sizeof(size_t), "digit_histogram");
    uint32_t *prefixes = TMC_CALLOC(1 << 16, sizeof(uint32_t), "prefix_index");
    if (!src || !dst || !count || !prefixes) return 1;
    for (size_t i = 0; i < n; i++) {
        src[i].key = (uint32_t)next_random();
        src[i].payload[0] = (uint32_t)i;
    }
    for (int shift = 0; shift < 32; shift += 8) {
        for (int d = 0; d < 256; d++) count[d] = 0;
        for (size_t i = 0; i < n; i++) count[(src[i].key >> shift) & 0xFF]++;
        size_t start = 0;
        for (int d = 0; d < 256; d++) {
            size_t c = count[d];
            count[d] = start;
            start += c;
        }
        for (size_t i = 0; i < n; i++) dst[count[(src[i].key >> shift) & 0xFF]++] = src[i];
        record *t = src;
        src = dst;
        dst = t;
    }
    /* Where each 16-bit prefix starts in the sorted array, then a check of every record. */
    for (size_t i = n; i-- > 0;) prefixes[src[i].key >> 16] = (uint32_t)i;
    uint64_t bad = 0;
    for (size_t i = 1; i < n; i++) {
        bad += src[i - 1].key > src[i].key;
        bad += prefixes[src[i].key >> 16] > i;
    }
    report("radixsort", bad * 1000003 + src[n / 2].payload[0]);
    return 0;
}
