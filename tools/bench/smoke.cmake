# ctest's bench smoke tests: runs `BENCH --quick` and checks that it exits 0 and prints its tables. No timing is
# checked (the machine running the tests may be anything). Usage: cmake -DBENCH=<path> [-DHEADINGS=a|b|c] -P smoke.cmake
# (HEADINGS: the headings the output must hold, separated by |; by default shmreplay_bench's).
execute_process(COMMAND "${BENCH}" --quick RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${BENCH} --quick exited with ${rc}\n${err}\n${out}")
endif()
if(DEFINED HEADINGS)
  string(REPLACE "|" ";" headings "${HEADINGS}")
else()
  set(headings "### Push" "### Sample" "### Contention" "### Targets" "### Pixels" "#### Push (" "#### Sample ("
               "#### Pixel targets")
endif()
foreach(heading IN LISTS headings)
  string(FIND "${out}" "${heading}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "${BENCH} --quick printed no '${heading}' table:\n${out}")
  endif()
endforeach()
