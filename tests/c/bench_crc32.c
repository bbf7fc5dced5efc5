/* ns per call of pymq_crc32, pymq_crc32_portable and zlib's crc32.
 * Build: cc -O3 -Ipymq/_core/src tests/c/bench_crc32.c pymq/_core/src/pymq_crc32.c -lz
 * "lat": each call takes the previous result as its initial crc (latency-bound);
 * "tput": independent calls with crc 0 (what hashing many message bodies looks like).
 * Each figure is the best of several runs, to filter out noise on a shared machine. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <zlib.h>

#include "pymq_crc32.h"

typedef uint32_t (*crc_fn)(uint32_t, const unsigned char *, size_t);

static uint32_t zlib_crc(uint32_t crc, const unsigned char *p, size_t len)
{
    return (uint32_t)crc32(crc, p, (uInt)len);
}

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static volatile uint32_t sink;

static double bench(crc_fn fn, const unsigned char *buf, size_t len, int chained)
{
    long iters = (long)(2e7 / (len + 32)) + 1000;
    double best = 1e30;

    for (int rep = 0; rep < 7; rep++) {
        uint32_t crc = 0;
        double t0 = now_ns();
        if (chained)
            for (long i = 0; i < iters; i++)
                crc = fn(crc, buf, len);
        else
            for (long i = 0; i < iters; i++)
                crc ^= fn(0, buf, len);
        double ns = (now_ns() - t0) / iters;
        sink = crc;
        if (ns < best)
            best = ns;
    }
    return best;
}

int main(void)
{
    static const size_t sizes[] = {16, 100, 1024, 65536};
    static const struct { const char *name; crc_fn fn; } impls[] = {
        {"pymq_crc32", pymq_crc32}, {"portable", pymq_crc32_portable}, {"zlib", zlib_crc}};
    unsigned char *buf = malloc(65536);

    if (!buf)
        return 1;
    for (size_t i = 0; i < 65536; i++)
        buf[i] = (unsigned char)(i * 2654435761u >> 13);
    printf("pymq_crc32 implementation: %s\n", pymq_crc32_impl());
    printf("%-12s", "ns/call");
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++)
        printf(" %8zu lat %8zu tput", sizes[s], sizes[s]);
    printf("   GB/s@65536\n");
    for (size_t f = 0; f < sizeof impls / sizeof *impls; f++) {
        double tput = 0;
        printf("%-12s", impls[f].name);
        for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
            double lat = bench(impls[f].fn, buf, sizes[s], 1);
            tput = bench(impls[f].fn, buf, sizes[s], 0);
            printf(" %12.2f %13.2f", lat, tput);
        }
        printf("   %10.2f\n", 65536 / tput);
    }
    free(buf);
    return 0;
}
