# ctest's bench_smoke: runs `shmreplay_bench --quick` and checks that it exits 0 and prints its tables. No timing
# is checked (the machine running the tests may be anything). Usage: cmake -DBENCH=<path> -P smoke.cmake
execute_process(COMMAND "${BENCH}" --quick RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "shmreplay_bench --quick exited with ${rc}\n${err}\n${out}")
endif()
foreach(heading "### Push" "### Sample" "### Contention" "### Targets" "### Pixels" "#### Push (" "#### Sample ("
                "#### Pixel targets")
  string(FIND "${out}" "${heading}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "shmreplay_bench --quick printed no '${heading}' table:\n${out}")
  endif()
endforeach()
