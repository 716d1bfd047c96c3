/* amp_map_ap (plugin/detector_map.c), the average precision of `detector
 * map` and -map, against values worked out by hand.
 *
 * One class, 4 objects, 5 detections by falling score: TP FP TP FP TP.
 *   precision 1, 1/2, 2/3, 1/2, 3/5; recall 1/4, 1/4, 1/2, 1/2, 3/4
 *   made monotone from the right: 1, 2/3, 2/3, 3/5, 3/5
 *   area under the curve: 1/4 * 1 + 1/4 * 2/3 + 1/4 * 3/5 = 17/30
 *   11 points (recall 0, 0.1, ..., 1): 0-0.2 -> 1 (3), 0.3-0.5 -> 2/3 (3),
 *     0.6-0.7 -> 3/5 (2), 0.8-1 -> 0 (3): (3 + 2 + 1.2) / 11 = 31/55
 *   101 points: 0-0.25 -> 1 (26), 0.26-0.5 -> 2/3 (25), 0.51-0.75 -> 3/5
 *     (25), 0.76-1 -> 0 (25): (26 + 50/3 + 15) / 101 = 173/303
 * Every detection a TP of exactly the objects: 1 at every point count; none
 * matched, or no detections: 0. */
#include "check.h"
#include "detector_map.h"

#include <math.h>

static void expect(const unsigned char *m, int n, int positives, int points, double want,
                   const char *what)
{
    const double got = amp_map_ap(m, n, positives, points);
    CHECK(fabs(got - want) < 1e-12, "%s, points %d: AP %.12f, by hand %.12f", what, points, got,
          want);
}

int main(void)
{
    const unsigned char mixed[5] = {1, 0, 1, 0, 1}, all[3] = {1, 1, 1}, none[3] = {0, 0, 0};
    expect(mixed, 5, 4, 0, 17.0 / 30, "TP FP TP FP TP of 4 objects");
    expect(mixed, 5, 4, 11, 31.0 / 55, "TP FP TP FP TP of 4 objects");
    expect(mixed, 5, 4, 101, 173.0 / 303, "TP FP TP FP TP of 4 objects");
    for (int p = 0; p <= 101; p += p ? 90 : 11)
        expect(all, 3, 3, p, 1, "3 TP of 3 objects");
    expect(none, 3, 3, 0, 0, "3 FP of 3 objects");
    expect(none, 0, 3, 11, 0, "no detections of 3 objects");
    return check_report();
}
