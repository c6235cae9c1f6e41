/* A compute-bound simulation beside cold data: a catalogue of stars loaded once, from which a
 * few hundred bodies are drawn; their pairwise gravity is stepped many times over a small hot
 * set, and each step appends a snapshot to a trajectory that is never read back.
 * Usage: nbody [catalogue MiB] [bodies] [steps]
 */
#include <math.h>
#include <stdlib.h>

#include "common.h"
#include "tmc_alloc.h"

typedef struct {
    double x, y, z, vx, vy, vz, m, pad;
} body;

int main(int argc, char **argv) {
    size_t catalogue_mib = argc > 1 ? (size_t)atol(argv[1]) : 24;
    size_t n = argc > 2 ? (size_t)atol(argv[2]) : 384;
    int steps = argc > 3 ? atoi(argv[3]) : 12;
    size_t stars = catalogue_mib * 1024 * 1024 / sizeof(body);
    body *catalogue = TMC_MALLOC(stars * sizeof(body), "star_catalogue");
    body *bodies = TMC_MALLOC(n * sizeof(body), "bodies");
    double *trajectory = TMC_MALLOC((size_t)steps * n * 3 * sizeof(double), "trajectory");
    if (!catalogue || !bodies || !trajectory) return 1;
    for (size_t s = 0; s < stars; s++) { /* loading the catalogue: one sequential write */
        uint64_t u = next_random();
        catalogue[s].x = (double)(u & 0xFFFF) / 65536.0;
        catalogue[s].y = (double)((u >> 16) & 0xFFFF) / 65536.0;
        catalogue[s].z = (double)((u >> 32) & 0xFFFF) / 65536.0;
        catalogue[s].vx = catalogue[s].vy = catalogue[s].vz = 0.0;
        catalogue[s].m = 1.0 + (double)((u >> 48) & 0xFF) / 256.0;
    }
    for (size_t i = 0; i < n; i++) bodies[i] = catalogue[(next_random() >> 8) % stars];
    const double dt = 1e-3, soft = 1e-4;
    for (int t = 0; t < steps; t++) {
        for (size_t i = 0; i < n; i++) {
            double ax = 0, ay = 0, az = 0;
            for (size_t j = 0; j < n; j++) {
                double dx = bodies[j].x - bodies[i].x, dy = bodies[j].y - bodies[i].y;
                double dz = bodies[j].z - bodies[i].z;
                double r2 = dx * dx + dy * dy + dz * dz + soft;
                double inv = bodies[j].m / (r2 * sqrt(r2));
                ax += dx * inv;
                ay += dy * inv;
                az += dz * inv;
            }
            bodies[i].vx += ax * dt;
            bodies[i].vy += ay * dt;
            bodies[i].vz += az * dt;
        }
        for (size_t i = 0; i < n; i++) {
            bodies[i].x += bodies[i].vx * dt;
            bodies[i].y += bodies[i].vy * dt;
            bodies[i].z += bodies[i].vz * dt;
            double *snap = trajectory + ((size_t)t * n + i) * 3;
            snap[0] = bodies[i].x;
            snap[1] = bodies[i].y;
            snap[2] = bodies[i].z;
        }
    }
    double e = 0;
    for (size_t i = 0; i < n; i++) e += bodies[i].vx * bodies[i].vx + bodies[i].vy * bodies[i].vy;
    report("nbody", (uint64_t)(e * 1e12) + (uint64_t)(trajectory[3] * 1e6));
    return 0;
}
