/* Converts valgrind lackey's `--trace-mem=yes` text into fixed-size binary records, fast enough
 * to read the trace from a pipe while the program runs (the text is ~20 bytes per access; Python
 * would parse it 50x slower).
 *
 * Input lines: "I  ADDR,SIZE" (an instruction), " L ADDR,SIZE" (load), " S ..." (store),
 * " M ..." (modify: a load and a store of the same address); "==PID== ..." lines are valgrind's
 * own messages and are skipped. Output: one record per data access, little-endian:
 *   uint64 address; uint32 instructions since the previous record; uint8 kind (0 load, 1 store,
 *   2 modify); uint8 size; uint16 zero.
 * The total instruction count is printed on stderr as "instructions N accesses M".
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

struct rec {
    uint64_t addr;
    uint32_t gap;
    uint8_t kind;
    uint8_t size;
    uint16_t pad;
};

static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

int main(int argc, char **argv) {
    FILE *in = argc > 1 ? fopen(argv[1], "r") : stdin;
    FILE *out = argc > 2 ? fopen(argv[2], "wb") : stdout;
    if (!in || !out) {
        perror("lackey2bin");
        return 2;
    }
    static char line[512];
    static struct rec buf[4096];
    size_t n = 0;
    uint64_t instructions = 0, accesses = 0;
    uint32_t gap = 0;
    while (fgets(line, sizeof line, in)) {
        char kind_c;
        const char *p;
        if (line[0] == 'I' && line[1] == ' ') {
            instructions++;
            if (gap < UINT32_MAX) gap++;
            continue;
        }
        if (line[0] != ' ' || line[2] != ' ') continue;
        kind_c = line[1];
        if (kind_c != 'L' && kind_c != 'S' && kind_c != 'M') continue;
        p = line + 3;
        uint64_t addr = 0;
        int d;
        while ((d = hexval((unsigned char)*p)) >= 0) {
            addr = addr << 4 | (uint64_t)d;
            p++;
        }
        unsigned size = 0;
        if (*p == ',') {
            p++;
            while (*p >= '0' && *p <= '9') size = size * 10 + (unsigned)(*p++ - '0');
        }
        struct rec r = {addr, gap, (uint8_t)(kind_c == 'L' ? 0 : kind_c == 'S' ? 1 : 2),
                        (uint8_t)(size > 255 ? 255 : size), 0};
        gap = 0;
        buf[n++] = r;
        accesses++;
        if (n == sizeof buf / sizeof buf[0]) {
            fwrite(buf, sizeof buf[0], n, out);
            n = 0;
        }
    }
    if (n) fwrite(buf, sizeof buf[0], n, out);
    fflush(out);
    fprintf(stderr, "instructions %llu accesses %llu\n", (unsigned long long)instructions,
            (unsigned long long)accesses);
    return 0;
}
