# Builds the patched darknet tree (DARKNET_DIR) from an explicit source list:
# darknet_headers (what users of darknet.h need: include path, defines, link
# libraries), darknet_objects (position-independent objects, compiled once),
# darknet_shared (libdarknet.so), darknet_static (libdarknet.a) and darknet_cli
# (the `darknet` program).
#
# Compile flags follow upstream's Makefile (-Ofast, no -march): the FP32
# regression test holds the fork bit-for-bit against Debian's package, which is
# built with exactly these, so they must not drift with CMAKE_BUILD_TYPE.

set(_dn_lib_sources
    gemm utils cuda deconvolutional_layer convolutional_layer list image activations
    im2col col2im blas crop_layer dropout_layer maxpool_layer softmax_layer data
    matrix network connected_layer cost_layer parser option_list detection_layer
    route_layer upsample_layer box normalization_layer avgpool_layer layer
    local_layer shortcut_layer logistic_layer activation_layer rnn_layer gru_layer
    crnn_layer demo batchnorm_layer region_layer reorg_layer tree lstm_layer
    l2norm_layer yolo_layer iseg_layer cfg_keys box_loss labels data_check weights_ema)
set(_dn_cuda_sources
    convolutional_kernels deconvolutional_kernels activation_kernels im2col_kernels
    col2im_kernels blas_kernels crop_layer_kernels dropout_layer_kernels
    maxpool_layer_kernels avgpool_layer_kernels)
set(_dn_cli_sources
    captcha lsd super art tag cifar go rnn segmenter regressor classifier coco yolo
    detector nightmare instance-segmenter darknet)

list(TRANSFORM _dn_lib_sources PREPEND "${DARKNET_DIR}/src/")
list(TRANSFORM _dn_lib_sources APPEND ".c")
list(TRANSFORM _dn_cli_sources PREPEND "${DARKNET_DIR}/examples/")
list(TRANSFORM _dn_cli_sources APPEND ".c")

add_library(darknet_headers INTERFACE)
target_include_directories(darknet_headers INTERFACE "${DARKNET_DIR}/include")
target_link_libraries(darknet_headers INTERFACE Threads::Threads m)

add_library(darknet_objects OBJECT ${_dn_lib_sources})
set_target_properties(darknet_objects PROPERTIES POSITION_INDEPENDENT_CODE ON)
target_include_directories(darknet_objects PRIVATE "${DARKNET_DIR}/src")
target_link_libraries(darknet_objects PUBLIC darknet_headers)
# DARKNET_AMP_SANITIZE instruments darknet too (CMakeLists.txt).
target_link_libraries(darknet_objects PRIVATE amp_sanitizers)
set(_dn_c_flags -Ofast -Wno-unused-result -Wno-unknown-pragmas)
target_compile_options(darknet_objects PRIVATE $<$<COMPILE_LANGUAGE:C>:${_dn_c_flags}>)

if(OpenMP_C_FOUND)
    target_link_libraries(darknet_headers INTERFACE OpenMP::OpenMP_C)
endif()

if(DARKNET_AMP_WITH_OPENCV)
    target_sources(darknet_objects PRIVATE "${DARKNET_DIR}/src/image_opencv.cpp")
    target_compile_definitions(darknet_headers INTERFACE OPENCV)
    target_link_libraries(darknet_headers INTERFACE PkgConfig::OpenCV)
endif()

if(DARKNET_AMP_WITH_CUDA)
    list(TRANSFORM _dn_cuda_sources PREPEND "${DARKNET_DIR}/src/")
    list(TRANSFORM _dn_cuda_sources APPEND ".cu")
    target_sources(darknet_objects PRIVATE ${_dn_cuda_sources})
    # GPU and CUDNN change darknet's structs: every user of the header must see
    # the same definitions as the library, so they travel with the headers.
    target_compile_definitions(darknet_headers INTERFACE GPU CUDNN)
    target_compile_options(darknet_objects PRIVATE
        $<$<COMPILE_LANGUAGE:CUDA>:-O3 -Xcompiler=-Ofast>)
    target_link_libraries(darknet_headers INTERFACE
        CUDA::cudart CUDA::cublas CUDA::curand CUDA::cuda_driver cudnn::cudnn)
endif()

add_library(darknet_shared SHARED $<TARGET_OBJECTS:darknet_objects>)
add_library(darknet_static STATIC $<TARGET_OBJECTS:darknet_objects>)
foreach(_t darknet_shared darknet_static)
    target_link_libraries(${_t} PUBLIC darknet_headers amp_sanitizers)
    set_target_properties(${_t} PROPERTIES OUTPUT_NAME darknet
        ARCHIVE_OUTPUT_DIRECTORY "${CMAKE_BINARY_DIR}/lib"
        LIBRARY_OUTPUT_DIRECTORY "${CMAKE_BINARY_DIR}/lib")
endforeach()

# The program links the static library, as upstream's Makefile does, so it runs
# from the build tree without an rpath to get wrong.
add_executable(darknet_cli ${_dn_cli_sources})
target_include_directories(darknet_cli PRIVATE "${DARKNET_DIR}/src")
target_compile_options(darknet_cli PRIVATE ${_dn_c_flags})
target_link_libraries(darknet_cli PRIVATE darknet_static amp_sanitizers)
# Named darknet-amp: Debian's stock `darknet` (the regression oracle) may be on
# PATH too, and silently ignores amp=1; the two must never be mistaken.
set_target_properties(darknet_cli PROPERTIES OUTPUT_NAME darknet-amp
    RUNTIME_OUTPUT_DIRECTORY "${CMAKE_BINARY_DIR}/bin")
if(DARKNET_AMP_WITH_CUDA)
    set_target_properties(darknet_shared darknet_cli PROPERTIES LINKER_LANGUAGE CUDA)
endif()
