# ctest's bench smoke tests that check headings: runs `BENCH --quick` and checks that it exits 0 and prints each
# of its tables. No timing is checked (the machine running the tests may be anything).
# Usage: cmake -DBENCH=<path> -DHEADINGS=a|b|c -P smoke.cmake (HEADINGS: the headings the output must hold,
# separated by |; tools/CMakeLists.txt's shmreplay_add_bench_smoke passes them). A script that includes this one may
# set BENCH_ARGS first: more arguments after --quick (codecs_smoke.cmake: --frames DIR).
execute_process(COMMAND "${BENCH}" --quick ${BENCH_ARGS} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${BENCH} --quick exited with ${rc}\n${err}\n${out}")
endif()
string(REPLACE "|" ";" headings "${HEADINGS}")
foreach(heading IN LISTS headings)
  string(FIND "${out}" "${heading}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "${BENCH} --quick printed no '${heading}' table:\n${out}")
  endif()
endforeach()
