/* The node tests' workload: a dynamically linked program (so the dynamic loader honours
 * LD_PRELOAD, as in a real workload's image) that prints what its process sees of tmc's
 * configuration: its environment, its plan file, the NUMA nodes it may allocate from, its memory
 * cgroup's limit, and whether the allocator shim is mapped into it. One `key value` per line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void print_file(const char *key, const char *path) {
    FILE *f = fopen(path, "r");
    char line[4096];
    if (!f) {
        printf("%s-missing %s\n", key, path);
        return;
    }
    while (fgets(line, sizeof line, f))
        printf("%s %s", key, line);
    fclose(f);
}

static void grep_file(const char *key, const char *path, const char *prefix) {
    FILE *f = fopen(path, "r");
    char line[4096];
    if (!f)
        return;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, prefix, strlen(prefix)) == 0)
            printf("%s %s", key, line);
    fclose(f);
}

int main(void) {
    const char *plan = getenv("TMC_PLAN");
    const char *preload = getenv("LD_PRELOAD");
    printf("env-TMC_PLAN %s\n", plan ? plan : "-");
    printf("env-LD_PRELOAD %s\n", preload ? preload : "-");
    if (plan)
        print_file("plan", plan);
    grep_file("status", "/proc/self/status", "Mems_allowed_list");
    print_file("memory-limit-v1", "/sys/fs/cgroup/memory/memory.limit_in_bytes");
    FILE *maps = fopen("/proc/self/maps", "r");
    char line[4096];
    int shim = 0;
    while (maps && fgets(line, sizeof line, maps))
        if (strstr(line, "libtmcalloc.so"))
            shim = 1;
    if (maps)
        fclose(maps);
    printf("shim-mapped %d\n", shim);
    fflush(stdout);
    return 0;
}
