# ctest's bench_codecs_smoke: records a few real Atari frames (tools/frames/record_atari.py: 2 games, 2 envs of 64
# steps, into FRAMES) and runs `BENCH --quick --frames FRAMES EXTRA...` as smoke.cmake does (exit 0, every heading printed).
# Usage: cmake -DPYTHON=<python with envpool> -DRECORDER=<record_atari.py> -DFRAMES=<dir> -DBENCH=<path>
#              -DHEADINGS=a|b|c [-DEXTRA=more;args] -P codecs_smoke.cmake
execute_process(COMMAND "${PYTHON}" "${RECORDER}" --out "${FRAMES}" --envs 2 --steps 64 --games Pong,Breakout
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${RECORDER} exited with ${rc}\n${err}\n${out}")
endif()
set(BENCH_ARGS --frames "${FRAMES}" ${EXTRA})
include(${CMAKE_CURRENT_LIST_DIR}/smoke.cmake)
