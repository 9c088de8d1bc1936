/*
 * Wall-clock jumps for one process, for the chaos suite's clock-jump nemesis.
 *
 * Loaded with LD_PRELOAD into a broker process. It replaces clock_gettime (for the realtime
 * clocks only), gettimeofday and time: each returns the real wall time plus an offset in
 * nanoseconds read from the file named by ROCKETQ_CLOCK_OFFSET_FILE (one decimal integer; a
 * missing or unreadable file means 0). The file is read again at most every 20 ms of monotonic
 * time, so a jump written by the test takes effect within 20 ms. The monotonic clocks, and every
 * sleep and timed wait, are left alone: a real clock jump (an NTP step, an operator's `date -s`)
 * moves the wall clock only.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>

typedef int (*clock_gettime_fn)(clockid_t, struct timespec *);

static clock_gettime_fn real_clock_gettime;
static long long offset_ns;
static long long next_read_ns = -1;

static long long monotonic_ns(void) {
    struct timespec ts;
    real_clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void refresh_offset(void) {
    if (!real_clock_gettime) {
        real_clock_gettime = (clock_gettime_fn)dlsym(RTLD_NEXT, "clock_gettime");
    }
    long long now = monotonic_ns();
    if (now < next_read_ns) {
        return;
    }
    next_read_ns = now + 20000000LL;
    const char *path = getenv("ROCKETQ_CLOCK_OFFSET_FILE");
    long long value = 0;
    if (path) {
        FILE *f = fopen(path, "r");
        if (f) {
            if (fscanf(f, "%lld", &value) != 1) {
                value = 0;
            }
            fclose(f);
        }
    }
    offset_ns = value;
}

static void shift(struct timespec *ts) {
    long long total = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec + offset_ns;
    ts->tv_sec = (time_t)(total / 1000000000LL);
    ts->tv_nsec = (long)(total % 1000000000LL);
    if (ts->tv_nsec < 0) {
        ts->tv_nsec += 1000000000L;
        ts->tv_sec -= 1;
    }
}

int clock_gettime(clockid_t clk, struct timespec *ts) {
    if (!real_clock_gettime) {
        real_clock_gettime = (clock_gettime_fn)dlsym(RTLD_NEXT, "clock_gettime");
    }
    int rc = real_clock_gettime(clk, ts);
    if (rc == 0 && (clk == CLOCK_REALTIME || clk == CLOCK_REALTIME_COARSE)) {
        refresh_offset();
        shift(ts);
    }
    return rc;
}

int gettimeofday(struct timeval *tv, void *tz) {
    struct timespec ts;
    (void)tz;
    int rc = clock_gettime(CLOCK_REALTIME, &ts);
    if (rc == 0 && tv) {
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = ts.tv_nsec / 1000;
    }
    return rc;
}

time_t time(time_t *out) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (out) {
        *out = ts.tv_sec;
    }
    return ts.tv_sec;
}
