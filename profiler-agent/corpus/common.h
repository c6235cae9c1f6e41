/* Shared by the corpus programs: a small xorshift generator (deterministic inputs, so that two
 * traces of one program are the same) and a checksum sink the compiler cannot drop. */
#ifndef TMC_CORPUS_COMMON_H
#define TMC_CORPUS_COMMON_H

#include <stdint.h>
#include <stdio.h>

static uint64_t corpus_rng = 0x2545F4914F6CDD1Dull;

static inline uint64_t next_random(void) {
    corpus_rng ^= corpus_rng << 13;
    corpus_rng ^= corpus_rng >> 7;
    corpus_rng ^= corpus_rng << 17;
    return corpus_rng;
}

static inline void report(const char *what, uint64_t value) {
    printf("%s %llu\n", what, (unsigned long long)value);
}

#endif
