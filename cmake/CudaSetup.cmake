# CUDA detection for DARKNET_AMP_CUDA=AUTO|ON|OFF. Sets DARKNET_AMP_WITH_CUDA and,
# when on, enables the CUDA language, finds the toolkit (CUDA::*) and cuDNN
# (cudnn::cudnn, version >= 9).
#
# CMAKE_CUDA_ARCHITECTURES, when the user has not set it (cache, -D or the
# CUDAARCHS environment variable), becomes every real architecture the
# installed nvcc accepts from sm_75 up, plus PTX for the newest so that future
# GPUs can JIT. nvcc 13 rejects anything older than 7.5 anyway.

set(DARKNET_AMP_WITH_CUDA OFF)
if(DARKNET_AMP_CUDA STREQUAL "OFF")
    return()
endif()

include(CheckLanguage)
check_language(CUDA)
if(NOT CMAKE_CUDA_COMPILER)
    if(DARKNET_AMP_CUDA STREQUAL "ON")
        message(FATAL_ERROR "DARKNET_AMP_CUDA=ON but no CUDA compiler was found "
                            "(set CMAKE_CUDA_COMPILER or put nvcc on PATH)")
    endif()
    return()
endif()

if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES AND NOT DEFINED ENV{CUDAARCHS})
    execute_process(COMMAND "${CMAKE_CUDA_COMPILER}" --list-gpu-arch
                    OUTPUT_VARIABLE _archs RESULT_VARIABLE _rc)
    set(_real "")
    if(_rc EQUAL 0)
        string(REGEX MATCHALL "compute_[0-9]+" _archs "${_archs}")
        foreach(_a IN LISTS _archs)
            string(REPLACE "compute_" "" _a "${_a}")
            if(_a GREATER_EQUAL 75)
                list(APPEND _real "${_a}")
            endif()
        endforeach()
    endif()
    if(NOT _real)
        message(FATAL_ERROR "${CMAKE_CUDA_COMPILER} --list-gpu-arch gave no architecture >= 75; "
                            "set CMAKE_CUDA_ARCHITECTURES")
    endif()
    list(SORT _real COMPARE NATURAL)
    list(REMOVE_DUPLICATES _real)
    list(POP_BACK _real _newest)
    list(TRANSFORM _real APPEND "-real")
    list(APPEND _real "${_newest}")
    set(CMAKE_CUDA_ARCHITECTURES "${_real}" CACHE STRING
        "CUDA architectures (default: all the installed nvcc supports from 75 up)")
endif()

enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)

find_path(CUDNN_INCLUDE_DIR cudnn_version.h
    HINTS ${CUDAToolkit_INCLUDE_DIRS} "${CUDAToolkit_LIBRARY_ROOT}/include")
find_library(CUDNN_LIBRARY cudnn
    HINTS ${CUDAToolkit_LIBRARY_DIR} "${CUDAToolkit_LIBRARY_ROOT}/lib64")
if(NOT CUDNN_INCLUDE_DIR OR NOT CUDNN_LIBRARY)
    message(FATAL_ERROR "CUDA found but cuDNN not (set CUDNN_INCLUDE_DIR and CUDNN_LIBRARY, "
                        "or configure with -DDARKNET_AMP_CUDA=OFF)")
endif()
file(STRINGS "${CUDNN_INCLUDE_DIR}/cudnn_version.h" _v REGEX "define CUDNN_(MAJOR|MINOR|PATCHLEVEL) ")
string(REGEX REPLACE ".*CUDNN_MAJOR ([0-9]+).*CUDNN_MINOR ([0-9]+).*CUDNN_PATCHLEVEL ([0-9]+).*"
       "\\1.\\2.\\3" CUDNN_VERSION "${_v}")
if(CUDNN_VERSION VERSION_LESS 9)
    message(FATAL_ERROR "cuDNN ${CUDNN_VERSION} found in ${CUDNN_INCLUDE_DIR}; 9 or newer is needed")
endif()
add_library(cudnn::cudnn UNKNOWN IMPORTED)
set_target_properties(cudnn::cudnn PROPERTIES
    IMPORTED_LOCATION "${CUDNN_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${CUDNN_INCLUDE_DIR}")
set(DARKNET_AMP_WITH_CUDA ON)
