/* AMP_HD: what makes a function of plugin/math/ compile for the host and,
 * under nvcc, for the device as well. */
#ifndef AMP_MATH_HD_H
#define AMP_MATH_HD_H

#ifdef __CUDACC__
#define AMP_HD __host__ __device__
#else
#define AMP_HD
#endif

#endif
