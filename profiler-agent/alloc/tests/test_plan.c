/* What the shim's own plan parser reads from the plan file named by TMC_PLAN: the shim's code is
 * compiled into this program (included, so that its parsed state can be printed; linked without
 * interposition, as the sanitized builds are) and parses the file at start-up exactly as it does
 * when preloaded. Printed one fact a line, for tests/agent/test_plan_golden.py to compare with
 * what model/node_contract.py and the golden files say:
 *   active 0|1
 *   fast_node N / slow_node N      (-1: not given)
 *   default_fast_bytes N|none
 *   tag NAME FAST_BYTES            (each tag the plan named, in the order it named them) */
#define TMC_NO_INTERPOSE 1
#include "../tmc_alloc.c"

int main(void) {
    ensure_init();
    printf("active %d\n", plan_active);
    printf("fast_node %d\nslow_node %d\n", fast_node, slow_node);
    if (default_fast_limit == UINT64_MAX) puts("default_fast_bytes none");
    else printf("default_fast_bytes %llu\n", (unsigned long long)default_fast_limit);
    /* Tag 0 is "(overflow)", made before the plan is read; every later tag is one it named. */
    uint32_t n = __atomic_load_n(&n_tags, __ATOMIC_ACQUIRE);
    for (uint32_t t = 1; t < n; t++)
        printf("tag %s %llu\n", arenas[t].name, (unsigned long long)arenas[t].fast_limit);
    return 0;
}
