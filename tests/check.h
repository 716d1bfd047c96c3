/* One check per line for the C tests: "ok: ..." or "FAIL: ...", then a final
 * verdict from check_report() (PASS/FAIL and the count), its exit status. */
#ifndef DARKNET_AMP_TEST_CHECK_H
#define DARKNET_AMP_TEST_CHECK_H

#include <stdio.h>

static int check_failures;

#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        int ok_ = (cond); /* once: cond may have side effects */           \
        printf(ok_ ? "ok: " : "FAIL: ");                                   \
        printf(__VA_ARGS__);                                               \
        printf("\n");                                                      \
        check_failures += !ok_;                                            \
    } while (0)

static inline int check_report(void)
{
    printf("%s: %d failed checks\n", check_failures ? "FAIL" : "PASS", check_failures);
    return check_failures != 0;
}

#endif
