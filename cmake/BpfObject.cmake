# SPDX-License-Identifier: Apache-2.0
# bpf_object(NAME SOURCES src.bpf.c... [VARIANT V] [DEFINES D...])
#   Compiles each SOURCE (a .bpf.c file: one attach family's entry points)
#   with clang -target bpf, links them into NAME.bpf.o with `bpftool gen
#   object` (libbpf's static linker: the maps every source defines, weak, are
#   one map in the result), and generates NAME.skel.h with `bpftool gen
#   skeleton`. Creates an INTERFACE target NAME_skel whose include directory
#   holds the skeleton.
#   With VARIANT, the sources are compiled with -D for each of DEFINES into
#   the subdirectory V (same file names, so the same #include) and the target
#   is NAME_V_skel: the test-only layout build uses it.
#
# vmlinux.h strategy: none is needed. The programs only touch UAPI structures
# (__sk_buff, bpf_sock_ops, packet headers) and, by CO-RE, the few kernel
# fields they declare themselves, so they build against the kernel UAPI
# headers of linux-libc-dev and libbpf-dev on any Debian 12 machine, with no
# dependency on the build host's running kernel or its BTF.
find_program(CLANG_EXE NAMES clang REQUIRED)
find_program(BPFTOOL_EXE NAMES bpftool PATHS /usr/sbin /sbin REQUIRED)
execute_process(COMMAND ${CMAKE_C_COMPILER} -print-multiarch
                OUTPUT_VARIABLE DP_MULTIARCH OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT DP_MULTIARCH)
  set(DP_MULTIARCH "x86_64-linux-gnu")
endif()

function(bpf_object name)
  cmake_parse_arguments(ARG "" "VARIANT" "SOURCES;DEFINES" ${ARGN})
  set(dir ${CMAKE_CURRENT_BINARY_DIR})
  set(target ${name})
  set(defs "")
  if(ARG_VARIANT)
    set(dir ${CMAKE_CURRENT_BINARY_DIR}/${ARG_VARIANT})
    set(target ${name}_${ARG_VARIANT})
  endif()
  file(MAKE_DIRECTORY ${dir}/parts)
  foreach(d IN LISTS ARG_DEFINES)
    list(APPEND defs -D${d})
  endforeach()
  file(GLOB_RECURSE bpf_headers ${CMAKE_CURRENT_SOURCE_DIR}/lib/*.h
       ${PROJECT_SOURCE_DIR}/include/dualpath/abi.h ${PROJECT_SOURCE_DIR}/include/dualpath/maps.h)
  set(parts "")
  foreach(source IN LISTS ARG_SOURCES)
    get_filename_component(stem ${source} NAME_WE)
    set(part ${dir}/parts/${stem}.o)
    add_custom_command(
      OUTPUT ${part}
      COMMAND ${CLANG_EXE} -g -O2 -target bpf -D__TARGET_ARCH_x86 ${defs}
              -Wall -Wextra -Werror -Wno-unused-parameter
              -I${CMAKE_CURRENT_SOURCE_DIR} -I${PROJECT_SOURCE_DIR}/include
              -I/usr/include/${DP_MULTIARCH}
              -c ${CMAKE_CURRENT_SOURCE_DIR}/${source} -o ${part}
      DEPENDS ${source} ${bpf_headers}
      COMMENT "BPF ${source} ${ARG_VARIANT}"
      VERBATIM)
    list(APPEND parts ${part})
  endforeach()
  set(obj ${dir}/${name}.bpf.o)
  set(skel ${dir}/${name}.skel.h)
  add_custom_command(
    OUTPUT ${obj}
    COMMAND ${BPFTOOL_EXE} gen object ${obj} ${parts}
    DEPENDS ${parts}
    COMMENT "bpftool gen object ${name} ${ARG_VARIANT}"
    VERBATIM)
  add_custom_command(
    OUTPUT ${skel}
    COMMAND ${BPFTOOL_EXE} gen skeleton ${obj} name ${name} > ${skel}
    DEPENDS ${obj}
    COMMENT "bpftool gen skeleton ${name} ${ARG_VARIANT}"
    VERBATIM)
  add_custom_target(${target}_skelgen DEPENDS ${skel} ${obj})
  add_library(${target}_skel INTERFACE)
  add_dependencies(${target}_skel ${target}_skelgen)
  target_include_directories(${target}_skel INTERFACE ${dir})
endfunction()
