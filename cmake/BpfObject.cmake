# bpf_object(NAME SOURCE)
#   Compiles SOURCE (a .bpf.c file) with clang -target bpf into NAME.bpf.o and
#   generates NAME.skel.h with `bpftool gen skeleton`. Creates an INTERFACE
#   target NAME_skel whose include directory holds the skeleton.
#
# vmlinux.h strategy: none is needed. The programs only touch UAPI structures
# (__sk_buff, bpf_sock_ops, packet headers), so they build against the kernel
# UAPI headers of linux-libc-dev and libbpf-dev on any Debian 12 machine, with
# no dependency on the build host's running kernel or its BTF.
find_program(CLANG_EXE NAMES clang REQUIRED)
find_program(BPFTOOL_EXE NAMES bpftool PATHS /usr/sbin /sbin REQUIRED)
execute_process(COMMAND ${CMAKE_C_COMPILER} -print-multiarch
                OUTPUT_VARIABLE DP_MULTIARCH OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT DP_MULTIARCH)
  set(DP_MULTIARCH "x86_64-linux-gnu")
endif()

function(bpf_object name source)
  set(obj ${CMAKE_CURRENT_BINARY_DIR}/${name}.bpf.o)
  set(skel ${CMAKE_CURRENT_BINARY_DIR}/${name}.skel.h)
  file(GLOB_RECURSE bpf_headers ${CMAKE_CURRENT_SOURCE_DIR}/lib/*.h
       ${PROJECT_SOURCE_DIR}/include/dualpath/abi.h)
  add_custom_command(
    OUTPUT ${obj}
    COMMAND ${CLANG_EXE} -g -O2 -target bpf -D__TARGET_ARCH_x86
            -Wall -Wextra -Werror -Wno-unused-parameter
            -I${CMAKE_CURRENT_SOURCE_DIR} -I${PROJECT_SOURCE_DIR}/include
            -I/usr/include/${DP_MULTIARCH}
            -c ${CMAKE_CURRENT_SOURCE_DIR}/${source} -o ${obj}
    DEPENDS ${source} ${bpf_headers}
    COMMENT "BPF ${source}"
    VERBATIM)
  add_custom_command(
    OUTPUT ${skel}
    COMMAND ${BPFTOOL_EXE} gen skeleton ${obj} name ${name} > ${skel}
    DEPENDS ${obj}
    COMMENT "bpftool gen skeleton ${name}"
    VERBATIM)
  add_custom_target(${name}_skelgen DEPENDS ${skel} ${obj})
  add_library(${name}_skel INTERFACE)
  add_dependencies(${name}_skel ${name}_skelgen)
  target_include_directories(${name}_skel INTERFACE ${CMAKE_CURRENT_BINARY_DIR})
endfunction()
