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
run(${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/build -DCMAKE_PREFIX_PATH=${prefix}
    -DCMAKE_BUILD_TYPE=${CONFIG})
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run(${WORK_DIR}/build/consumer)

# The Python package, when the build has it: it imports from the install tree alone.
if(PYTHON_EXECUTABLE AND PYTHON_INSTALL_DIR)
  file(GLOB installed ${prefix}/${PYTHON_INSTALL_DIR}/shmreplay/_shmreplay*.so)
  if(NOT installed)
    message(FATAL_ERROR "the Python module is not installed under ${prefix}/${PYTHON_INSTALL_DIR}/shmreplay")
  endif()
  run(${CMAKE_COMMAND} -E env PYTHONPATH=${prefix}/${PYTHON_INSTALL_DIR} ${PYTHON_EXECUTABLE} -c
      "import shmreplay\nassert shmreplay.__file__.startswith('${prefix}'), shmreplay.__file__\nprint('python', shmreplay.__version__)")  # no ';': run() would split there
endif()
