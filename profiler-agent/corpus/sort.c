/* Sorting: a merge sort of random 64-bit keys with a scratch buffer (streams that halve in
 * locality each level), then a pass of binary searches over the sorted keys.
 * Usage: sort [keys]
 */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "tmc_alloc.h"

static void merge_sort(uint64_t *a, uint64_t *tmp, size_t n) {
    for (size_t width = 1; width < n; width *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * width) {
            size_t mid = lo + width < n ? lo + width : n;
            size_t hi = lo + 2 * width < n ? lo + 2 * width : n;
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) tmp[k++] = a[i] <= a[j] ? a[i++] : a[j++];
            while (i < mid) tmp[k++] = a[i++];
            while (j < hi) tmp[k++] = a[j++];
        }
        memcpy(a, tmp, n * sizeof(uint64_t));
    }
}

int main(int argc, char **argv) {
    size_t n = argc > 1 ? (size_t)atol(argv[1]) : 1500000;
    uint64_t *keys = TMC_MALLOC(n * sizeof(uint64_t), "keys");
    uint64_t *scratch = TMC_MALLOC(n * sizeof(uint64_t), "merge_scratch");
    if (!keys || !scratch) return 1;
    for (size_t i = 0; i < n; i++) keys[i] = next_random();
    merge_sort(keys, scratch, n);
    uint64_t found = 0;
    for (size_t q = 0; q < n / 8; q++) {
        uint64_t want = keys[next_random() % n];
        size_t lo = 0, hi = n;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (keys[mid] < want) lo = mid + 1; else hi = mid;
        }
        found += lo;
    }
    report("sort", found);
    return 0;
}
