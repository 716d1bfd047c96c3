# Obtains darknet's source and applies patches/series to a copy of it.
#
# Sets DARKNET_DIR, the patched tree inside the build directory, and
# DARKNET_PRISTINE_DIR, the unpatched source it was copied from. The pristine
# source comes from DARKNET_SOURCE_DIR when given (never modified), otherwise
# from Debian's source package (cmake/fetch-darknet-source.sh), fetched once per
# build directory. The patched copy carries a stamp of the pristine source and
# of every patch: re-configuring with the same inputs reuses it, any change to
# a patch or to the series gives a clean re-extract, never a patch applied twice.

set(DARKNET_DEBIAN_VERSION "0.0.0+git20180914.61c9d02e-2" CACHE STRING
    "Debian source package version of darknet to fetch with apt")
set(DARKNET_SOURCE_DIR "" CACHE PATH
    "Use this darknet tree (pjreddie/darknet at 61c9d02e, Debian's or not) instead of fetching it")

set(_dn_root "${CMAKE_BINARY_DIR}/_darknet")
set(_dn_series "${PROJECT_SOURCE_DIR}/patches/series")

if(DARKNET_SOURCE_DIR)
    get_filename_component(_dn_pristine "${DARKNET_SOURCE_DIR}" ABSOLUTE)
    if(NOT EXISTS "${_dn_pristine}/src/parser.c" OR NOT EXISTS "${_dn_pristine}/include/darknet.h")
        message(FATAL_ERROR "DARKNET_SOURCE_DIR=${DARKNET_SOURCE_DIR} is not a darknet tree "
                            "(no src/parser.c or include/darknet.h)")
    endif()
    set(_dn_origin "dir:${_dn_pristine}")
else()
    set(_dn_pristine "${_dn_root}/pristine")
    set(_dn_origin "debian:${DARKNET_DEBIAN_VERSION}")
    set(_dn_fetched "")
    if(EXISTS "${_dn_root}/pristine.stamp")
        file(READ "${_dn_root}/pristine.stamp" _dn_fetched)
    endif()
    if(NOT _dn_fetched STREQUAL _dn_origin)
        message(STATUS "Fetching darknet ${DARKNET_DEBIAN_VERSION} with apt-get source")
        execute_process(
            COMMAND sh "${PROJECT_SOURCE_DIR}/cmake/fetch-darknet-source.sh"
                    "${_dn_pristine}" "${DARKNET_DEBIAN_VERSION}"
            RESULT_VARIABLE _dn_rc)
        if(NOT _dn_rc EQUAL 0)
            message(FATAL_ERROR "Could not obtain darknet's source (see above). "
                "Install dpkg-dev, or pass -DDARKNET_SOURCE_DIR=<darknet tree>.")
        endif()
        file(WRITE "${_dn_root}/pristine.stamp" "${_dn_origin}")
    endif()
endif()

set(DARKNET_PRISTINE_DIR "${_dn_pristine}")

# Everything that decides the patched tree's content goes into its stamp.
file(STRINGS "${_dn_series}" _dn_series_lines)
set(_dn_patches "")
set(_dn_stamp "${_dn_origin}\n")
foreach(_line IN LISTS _dn_series_lines)
    string(STRIP "${_line}" _line)
    if(_line STREQUAL "" OR _line MATCHES "^#")
        continue()
    endif()
    set(_patch "${PROJECT_SOURCE_DIR}/patches/${_line}")
    if(NOT EXISTS "${_patch}")
        message(FATAL_ERROR "patches/series names ${_line}, which does not exist")
    endif()
    file(SHA256 "${_patch}" _sum)
    string(APPEND _dn_stamp "${_line} ${_sum}\n")
    list(APPEND _dn_patches "${_patch}")
endforeach()
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${_dn_series}" ${_dn_patches})

set(DARKNET_DIR "${_dn_root}/darknet")
set(_dn_applied "")
if(EXISTS "${_dn_root}/patched.stamp")
    file(READ "${_dn_root}/patched.stamp" _dn_applied)
endif()
if(NOT _dn_applied STREQUAL _dn_stamp OR NOT EXISTS "${DARKNET_DIR}/src/parser.c")
    find_program(PATCH_EXECUTABLE patch REQUIRED)
    file(REMOVE_RECURSE "${DARKNET_DIR}" "${_dn_root}/patched.stamp")
    file(COPY "${_dn_pristine}/" DESTINATION "${DARKNET_DIR}"
         PATTERN ".git" EXCLUDE PATTERN ".pc" EXCLUDE)
    foreach(_patch IN LISTS _dn_patches)
        get_filename_component(_name "${_patch}" NAME)
        execute_process(
            COMMAND "${PATCH_EXECUTABLE}" -p1 --forward --batch --no-backup-if-mismatch
                    -i "${_patch}"
            WORKING_DIRECTORY "${DARKNET_DIR}"
            OUTPUT_VARIABLE _out ERROR_VARIABLE _out RESULT_VARIABLE _rc)
        if(NOT _rc EQUAL 0)
            message(FATAL_ERROR "patch ${_name} does not apply to ${_dn_origin}:\n${_out}")
        endif()
    endforeach()
    file(WRITE "${_dn_root}/patched.stamp" "${_dn_stamp}")
    list(LENGTH _dn_patches _n)
    message(STATUS "darknet: ${_n} patches applied to ${_dn_origin}")
else()
    message(STATUS "darknet: patched tree up to date (${_dn_origin})")
endif()
