/* Reads a darknet weights file back, value by value, as the tests' own
 * check of what a run saved (independent of the plugin's reader):
 *
 *   weights_values FILE    prints "values N nonfinite K", exit 0; 1 when
 *                          the file cannot be read
 *
 * The header is three int32 (major, minor, revision) and seen, a size_t from
 * version 0.2 on (an int32 before); every byte after it is a float32 value.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: weights_values FILE\n");
        return 2;
    }
    FILE *f = fopen(argv[1], "rb");
    int32_t head[3];
    if (!f || fread(head, sizeof head, 1, f) != 1) {
        fprintf(stderr, "weights_values: cannot read %s\n", argv[1]);
        return 1;
    }
    const int long_seen =
        (long long)head[0] * 10 + head[1] >= 2 && head[0] < 1000 && head[1] < 1000;
    unsigned char seen[8];
    if (fread(seen, long_seen ? 8 : 4, 1, f) != 1) {
        fprintf(stderr, "weights_values: %s: shorter than its header\n", argv[1]);
        return 1;
    }
    unsigned long long values = 0, nonfinite = 0;
    uint32_t bits;
    while (fread(&bits, sizeof bits, 1, f) == 1) {
        values += 1;
        nonfinite += (bits & 0x7f800000u) == 0x7f800000u;
    }
    fclose(f);
    printf("values %llu nonfinite %llu\n", values, nonfinite);
    return 0;
}
