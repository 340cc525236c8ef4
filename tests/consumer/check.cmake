# Installs the build at BUILD_DIR into a scratch prefix, then configures, builds and runs the consumer project
# in SOURCE_DIR against it. Run with cmake -P; fails on the first step that fails.
file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
endfunction()

run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix} --config ${CONFIG})
# A shared build (-DBUILD_SHARED_LIBS=ON) installs libshmreplay.so.VERSION, and its soname link
# libshmreplay.so.SOVERSION (the library target's properties, passed in); a static build installs libshmreplay.a.
file(GLOB_RECURSE shared_libs ${prefix}/libshmreplay.so*)
if(shared_libs)
  list(TRANSFORM shared_libs REPLACE ".*/" "")
  foreach(expected libshmreplay.so.${VERSION} libshmreplay.so.${SOVERSION})
    if(NOT expected IN_LIST shared_libs)
      message(FATAL_ERROR "the install has no ${expected}, only ${shared_libs}")
    endif()
  endforeach()
endif()
run(${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/build -DCMAKE_PREFIX_PATH=${prefix}
    -DCMAKE_BUILD_TYPE=${CONFIG})
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run(${WORK_DIR}/build/consumer)
